// Package spechttp serves the mesh specification's REST API
// (/api/v1/spec): it reads requests into documents, applies and deletes
// them through a *spec.Spec and answers with the spec's results and
// errors as JSON. The specification's types, parsing, validation and
// storage are internal/spec's; this package holds only the HTTP edge, and
// internal/spec does not import it. The CLI calls the API through
// internal/spec/specclient, which must not import this package.
package spechttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
)

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
//	GET    /api/v1/spec/services/{namespace}/{name}/resilience  -> resilienceview.Service
func NewHandler(log *slog.Logger, sp *spec.Spec, opts Options) http.Handler {
	h := &handler{log: log, sp: sp, opts: opts}
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
	mux.HandleFunc("GET /api/v1/spec/services/{namespace}/{name}/resilience", h.resilience)
	return mux
}

// Options configure [NewHandler].
type Options struct {
	// HasEndpoints, when set, makes apply and diff warn where a route
	// leads to a service nobody serves (see [spec.ApplyOptions]); nil:
	// no such warnings.
	HasEndpoints spec.HasEndpoints
	// GatewayMachines, when set, gives the Gateways served their
	// Programmed conditions (gateway.ProgramStatus): what the machines
	// connected as each Gateway did with its configuration. nil: the
	// status says only that the Gateway was accepted for rendering.
	GatewayMachines gateway.Machines
}

type handler struct {
	log  *slog.Logger
	sp   *spec.Spec
	opts Options
}

// filesBody is the body of a [spec.FilesMediaType] request.
type filesBody struct {
	Files []spec.File `json:"files"`
}

func (h *handler) readDocs(w http.ResponseWriter, r *http.Request) ([]spec.Document, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, spec.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.writeError(w, http.StatusRequestEntityTooLarge, "BadRequest", fmt.Errorf("request body is larger than %d bytes: split the batch", spec.MaxRequestBytes))
			return nil, false
		}
		h.writeError(w, http.StatusBadRequest, "BadRequest", fmt.Errorf("read request body: %w", err))
		return nil, false
	}
	files := []spec.File{{Source: r.URL.Query().Get("source"), Data: string(body)}}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == spec.FilesMediaType {
		var fb filesBody
		if err := json.Unmarshal(body, &fb); err != nil {
			h.writeError(w, http.StatusBadRequest, "BadRequest", fmt.Errorf("decode %s body: %w", spec.FilesMediaType, err))
			return nil, false
		}
		files = fb.Files
	}
	docs, err := spec.ParseFiles(files)
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

// readBatch reads a batch of documents and its dryRun parameter, or
// answers the error.
func (h *handler) readBatch(w http.ResponseWriter, r *http.Request) ([]spec.Document, bool, bool) {
	dry, err := boolParam(r, "dryRun")
	if err != nil {
		h.writeError(w, http.StatusBadRequest, "BadRequest", err)
		return nil, false, false
	}
	docs, ok := h.readDocs(w, r)
	return docs, dry, ok
}

func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	docs, dry, ok := h.readBatch(w, r)
	if !ok {
		return
	}
	res, err := h.sp.Apply(r.Context(), docs, spec.ApplyOptions{DryRun: dry, HasEndpoints: h.opts.HasEndpoints})
	h.writeResult(w, res, err)
}

func (h *handler) diff(w http.ResponseWriter, r *http.Request) {
	docs, ok := h.readDocs(w, r)
	if !ok {
		return
	}
	res, err := h.sp.Apply(r.Context(), docs, spec.ApplyOptions{Diff: true, HasEndpoints: h.opts.HasEndpoints})
	h.writeResult(w, res, err)
}

func (h *handler) deleteDocs(w http.ResponseWriter, r *http.Request) {
	docs, dry, ok := h.readBatch(w, r)
	if !ok {
		return
	}
	keys := make([]spec.Key, len(docs))
	for i, d := range docs {
		keys[i] = d.Key()
	}
	res, err := h.sp.Delete(r.Context(), keys, dry)
	h.writeResult(w, res, err)
}

// keyFromPath resolves {kind}/{namespace}/{name}; cluster-wide kinds
// (MeshConfig) have no namespace segment.
func keyFromPath(r *http.Request) (spec.Key, error) {
	ks, err := spec.ResolveKinds(r.PathValue("kind"))
	if err != nil {
		return spec.Key{}, err
	}
	if len(ks) != 1 {
		return spec.Key{}, fmt.Errorf("%q names several kinds: name one, such as services", r.PathValue("kind"))
	}
	kind := ks[0]
	plural, namespaced, _ := spec.KindNames(kind)
	k := spec.Key{Kind: kind, Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	switch {
	case namespaced && k.Namespace == "":
		return spec.Key{}, fmt.Errorf("%s is namespaced: use /api/v1/spec/%s/{namespace}/{name}", kind, plural)
	case !namespaced && k.Namespace != "":
		return spec.Key{}, fmt.Errorf("%s is mesh-wide: use /api/v1/spec/%s/{name}", kind, plural)
	}
	return k, nil
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ks, err := spec.ResolveKinds(r.PathValue("kind"))
	if err != nil {
		h.writeError(w, http.StatusNotFound, "NotFound", err)
		return
	}
	ns := r.URL.Query().Get("namespace")
	snap := h.sp.Snapshot()
	body := spec.ListBody{Version: snap.Version(), Items: []json.RawMessage{}}
	for _, o := range snap.Objects(ks...) {
		if ns != "" && o.Key().Namespace != ns {
			continue
		}
		h.programmed(o)
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
	o, err := h.sp.Snapshot().Object(k)
	if err != nil {
		h.writeError(w, http.StatusNotFound, "NotFound", err)
		return
	}
	h.programmed(o)
	writeJSON(w, http.StatusOK, o)
}

// resilience answers a Service's effective failure handling: what
// governs each caller's calls to it, and which policy set each part.
func (h *handler) resilience(w http.ResponseWriter, r *http.Request) {
	svc := mesh.MeshService{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	view, ok := resilienceview.Of(h.sp.Snapshot(), svc)
	if !ok {
		h.writeError(w, http.StatusNotFound, "NotFound", fmt.Errorf("Service %q not found in namespace %q: osm-server get services lists them", svc.Name, svc.Namespace))
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// programmed sets a Gateway's Programmed conditions from the machines
// connected as it (o is the snapshot's copy, which the handler may
// change).
func (h *handler) programmed(o spec.Object) {
	g, ok := o.(*spec.Gateway)
	if !ok || h.opts.GatewayMachines == nil {
		return
	}
	gw := mesh.MeshService{Namespace: g.Metadata.Namespace, Name: g.Metadata.Name}
	gateway.ProgramStatus(g.Status, gw, h.opts.GatewayMachines.GatewayMachines(gw))
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
	res, err := h.sp.Delete(r.Context(), []spec.Key{k}, dry)
	h.writeResult(w, res, err)
}

func (h *handler) writeResult(w http.ResponseWriter, res spec.BatchResult, err error) {
	if err != nil {
		h.writeSpecError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *handler) writeSpecError(w http.ResponseWriter, err error) {
	var ve *spec.ValidationError
	switch {
	case errors.As(err, &ve):
		writeJSON(w, http.StatusBadRequest, meshapi.ErrorBody{Reason: meshapi.ReasonInvalid, Error: fmt.Sprintf("%d problem(s) in the mesh specification; nothing was changed", len(ve.Errors)), Errors: ve.Errors})
	case errors.Is(err, spec.ErrConflict):
		h.writeError(w, http.StatusConflict, "Conflict", err)
	case errors.Is(err, spec.ErrNotFound):
		h.writeError(w, http.StatusNotFound, "NotFound", err)
	default:
		h.log.Error("mesh specification request failed", "err", err)
		h.writeError(w, http.StatusInternalServerError, "Internal", err)
	}
}

func (h *handler) writeError(w http.ResponseWriter, status int, reason string, err error) {
	writeJSON(w, status, meshapi.ErrorBody{Reason: reason, Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
