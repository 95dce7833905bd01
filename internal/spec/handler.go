package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// FilesMediaType is the content type of a batch made of several files (as
// `apply -f DIR` sends), so errors name each file: a JSON object
// {"files": [{"source": "a.yaml", "data": "..."}]}.
const FilesMediaType = "application/vnd.osm-vm.files+json"

// File is one named input of a batch.
type File struct {
	Source string `json:"source"`
	Data   string `json:"data"`
}

type filesBody struct {
	Files []File `json:"files"`
}

// ErrorBody is the JSON body of every error response, the API's one
// error document; Reason is Invalid (with Errors), Conflict, NotFound,
// BadRequest or Internal.
type ErrorBody = meshapi.ErrorBody

// ListBody is the JSON body of a list.
type ListBody struct {
	Version uint64            `json:"version"`
	Items   []json.RawMessage `json:"items"`
}

// NewHandler returns the REST API of the mesh specification, rooted at
// /api/v1/spec. It does no authentication: mount it behind the admin-token
// middleware.
//
//	POST   /api/v1/spec/apply[?dryRun=true][&source=NAME]  YAML/JSON documents -> BatchResult
//	POST   /api/v1/spec/diff[?source=NAME]                  documents -> BatchResult with diffs
//	POST   /api/v1/spec/delete[?dryRun=true]                documents -> BatchResult
//	GET    /api/v1/spec[?namespace=NS]                      every document -> ListBody
//	GET    /api/v1/spec/{kind}[?namespace=NS]               kind, plural, "policies" -> ListBody
//	GET    /api/v1/spec/{kind}/{namespace}/{name}           one document (MeshConfig: /meshconfigs/mesh)
//	DELETE /api/v1/spec/{kind}/{namespace}/{name}           -> BatchResult
func NewHandler(log *slog.Logger, s *Spec, opts ...HandlerOption) http.Handler {
	h := &handler{log: log, spec: s}
	for _, o := range opts {
		o(h)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/spec/apply", h.apply)
	mux.HandleFunc("POST /api/v1/spec/diff", h.diff)
	mux.HandleFunc("POST /api/v1/spec/delete", h.deleteDocs)
	mux.HandleFunc("GET /api/v1/spec", h.list)
	mux.HandleFunc("GET /api/v1/spec/{kind}", h.list)
	mux.HandleFunc("GET /api/v1/spec/{kind}/{name}", h.get)
	mux.HandleFunc("GET /api/v1/spec/{kind}/{namespace}/{name}", h.get)
	mux.HandleFunc("DELETE /api/v1/spec/{kind}/{name}", h.deleteOne)
	mux.HandleFunc("DELETE /api/v1/spec/{kind}/{namespace}/{name}", h.deleteOne)
	return mux
}

type handler struct {
	log          *slog.Logger
	spec         *Spec
	hasEndpoints HasEndpoints // nil: no warnings about unserved services
}

func (h *handler) readDocs(w http.ResponseWriter, r *http.Request) ([]Document, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.writeError(w, http.StatusRequestEntityTooLarge, "BadRequest", fmt.Errorf("request body is larger than %d bytes: split the batch", MaxRequestBytes))
			return nil, false
		}
		h.writeError(w, http.StatusBadRequest, "BadRequest", fmt.Errorf("read request body: %w", err))
		return nil, false
	}
	files := []File{{Source: r.URL.Query().Get("source"), Data: string(body)}}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == FilesMediaType {
		var fb filesBody
		if err := json.Unmarshal(body, &fb); err != nil {
			h.writeError(w, http.StatusBadRequest, "BadRequest", fmt.Errorf("decode %s body: %w", FilesMediaType, err))
			return nil, false
		}
		files = fb.Files
	}
	docs, err := ParseFiles(files)
	if err != nil {
		h.writeSpecError(w, err)
		return nil, false
	}
	if len(docs) == 0 {
		h.writeError(w, http.StatusBadRequest, "BadRequest", errors.New("no documents in the request body: send YAML or JSON documents"))
		return nil, false
	}
	return docs, true
}

// ParseFiles parses several files into one batch.
func ParseFiles(files []File) ([]Document, error) {
	var (
		docs   []Document
		all    []FieldError
		budget = int64(maxRequestExpandedBytes) // shared by the files
	)
	for _, f := range files {
		d, err := parse([]byte(f.Data), f.Source, &budget)
		var ve *ValidationError
		if errors.As(err, &ve) {
			all = append(all, ve.Errors...)
		} else if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
		if budget < 0 {
			break // the request is too large: the rest is not read
		}
	}
	if len(all) > 0 {
		return nil, &ValidationError{Errors: all}
	}
	return docs, nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	dry, err := boolParam(r, "dryRun")
	if err != nil {
		h.writeError(w, http.StatusBadRequest, "BadRequest", err)
		return
	}
	docs, ok := h.readDocs(w, r)
	if !ok {
		return
	}
	res, err := h.spec.Apply(r.Context(), docs, ApplyOptions{DryRun: dry, HasEndpoints: h.hasEndpoints})
	h.writeResult(w, res, err)
}

func (h *handler) diff(w http.ResponseWriter, r *http.Request) {
	docs, ok := h.readDocs(w, r)
	if !ok {
		return
	}
	res, err := h.spec.Apply(r.Context(), docs, ApplyOptions{Diff: true, HasEndpoints: h.hasEndpoints})
	h.writeResult(w, res, err)
}

func (h *handler) deleteDocs(w http.ResponseWriter, r *http.Request) {
	dry, err := boolParam(r, "dryRun")
	if err != nil {
		h.writeError(w, http.StatusBadRequest, "BadRequest", err)
		return
	}
	docs, ok := h.readDocs(w, r)
	if !ok {
		return
	}
	keys := make([]Key, len(docs))
	for i, d := range docs {
		keys[i] = d.Key()
	}
	res, err := h.spec.Delete(r.Context(), keys, dry)
	h.writeResult(w, res, err)
}

// keyFromPath resolves {kind}/{namespace}/{name}; cluster-wide kinds
// (MeshConfig) have no namespace segment.
func keyFromPath(r *http.Request) (Key, error) {
	ks, err := ResolveKinds(r.PathValue("kind"))
	if err != nil {
		return Key{}, err
	}
	if len(ks) != 1 {
		return Key{}, fmt.Errorf("%q names several kinds: name one, such as services", r.PathValue("kind"))
	}
	ki, _ := lookupKind(ks[0])
	k := Key{Kind: ki.kind, Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	switch {
	case ki.namespaced && k.Namespace == "":
		return Key{}, fmt.Errorf("%s is namespaced: use /api/v1/spec/%s/{namespace}/{name}", ki.kind, ki.plural)
	case !ki.namespaced && k.Namespace != "":
		return Key{}, fmt.Errorf("%s is mesh-wide: use /api/v1/spec/%s/{name}", ki.kind, ki.plural)
	}
	return k, nil
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ks, err := ResolveKinds(r.PathValue("kind"))
	if err != nil {
		h.writeError(w, http.StatusNotFound, "NotFound", err)
		return
	}
	ns := r.URL.Query().Get("namespace")
	snap := h.spec.Snapshot()
	body := ListBody{Version: snap.Version(), Items: []json.RawMessage{}}
	for _, o := range snap.Objects(ks...) {
		if ns != "" && o.Key().Namespace != ns {
			continue
		}
		b, err := json.Marshal(o)
		if err != nil {
			h.writeError(w, http.StatusInternalServerError, "Internal", err)
			return
		}
		body.Items = append(body.Items, b)
	}
	writeJSON(w, http.StatusOK, body)
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	k, err := keyFromPath(r)
	if err != nil {
		h.writeError(w, http.StatusNotFound, "NotFound", err)
		return
	}
	snap := h.spec.Snapshot()
	o, ok := snap.Object(k)
	if !ok {
		h.writeError(w, http.StatusNotFound, "NotFound", fmt.Errorf("%s does not exist%s", k, didYouMean(k.Name, namesOfKind(snap.st, k.Kind, k.Namespace))))
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (h *handler) deleteOne(w http.ResponseWriter, r *http.Request) {
	dry, err := boolParam(r, "dryRun")
	if err != nil {
		h.writeError(w, http.StatusBadRequest, "BadRequest", err)
		return
	}
	k, err := keyFromPath(r)
	if err != nil {
		h.writeError(w, http.StatusNotFound, "NotFound", err)
		return
	}
	res, err := h.spec.Delete(r.Context(), []Key{k}, dry)
	h.writeResult(w, res, err)
}

func (h *handler) writeResult(w http.ResponseWriter, res BatchResult, err error) {
	if err != nil {
		h.writeSpecError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *handler) writeSpecError(w http.ResponseWriter, err error) {
	var ve *ValidationError
	switch {
	case errors.As(err, &ve):
		writeJSON(w, http.StatusBadRequest, ErrorBody{Reason: meshapi.ReasonInvalid, Error: fmt.Sprintf("%d problem(s) in the mesh specification; nothing was changed", len(ve.Errors)), Errors: ve.Errors})
	case errors.Is(err, ErrConflict):
		h.writeError(w, http.StatusConflict, "Conflict", err)
	case errors.Is(err, ErrNotFound):
		h.writeError(w, http.StatusNotFound, "NotFound", err)
	default:
		h.log.Error("mesh specification request failed", "err", err)
		h.writeError(w, http.StatusInternalServerError, "Internal", err)
	}
}

func (h *handler) writeError(w http.ResponseWriter, status int, reason string, err error) {
	writeJSON(w, status, ErrorBody{Reason: reason, Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
