package spec

import (
	"encoding/json"
	"errors"
)

// The documents of the specification's REST API (internal/spec/spechttp
// serves it, internal/spec/specclient calls it) that are not
// specification documents themselves.

// FilesMediaType is the content type of a batch made of several files (as
// `apply -f DIR` sends), so errors name each file: a JSON object
// {"files": [{"source": "a.yaml", "data": "..."}]}.
const FilesMediaType = "application/vnd.osm-vm.files+json"

// File is one named input of a batch.
type File struct {
	Source string `json:"source"`
	Data   string `json:"data"`
}

// ListBody is the JSON body of a list.
type ListBody struct {
	Version uint64            `json:"version"`
	Items   []json.RawMessage `json:"items"`
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
