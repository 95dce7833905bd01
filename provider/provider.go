// Package provider is the public SDK for osm-vm endpoints-provider plugins.
//
// A provider resolves mesh services (a namespace and a name) to the addresses
// of the machines that serve them. It runs as its own executable, started by
// osm-server over hashicorp/go-plugin; a plugin's main function is one line:
//
//	func main() { provider.Serve(&myProvider{}) }
//
// The same Provider interface is what osm-server sees on its side of the
// plugin connection, so a provider can be tested in-process and over a real
// subprocess with the same conformance suite (package providertest).
//
// This package imports nothing of osm-vm but the generated API in proto/.
package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
)

// Provider is implemented by every endpoints provider. Every method takes the
// caller's context; across the plugin boundary it carries cancellation and
// deadlines.
type Provider interface {
	// Describe says what the plugin is. It may be called before Configure.
	Describe(ctx context.Context) (Info, error)
	// Configure receives the instance's `config` block as JSON, once per
	// plugin process. Return an error wrapping ErrInvalidConfig for bad
	// configuration; DecodeConfig does the strict decoding for you. The host
	// allows it 30 seconds: a slow backend should be reported through
	// Watch health events rather than by blocking here.
	Configure(ctx context.Context, instance string, config []byte) error
	// ListServices returns every service the provider knows now. Before the
	// first complete read of the backend, return ErrUnavailable rather than
	// an empty list: the host then keeps the instance's previous endpoints
	// and restarts the plugin with backoff, where an empty list would
	// withdraw them.
	ListServices(ctx context.Context) ([]Service, error)
	// ListEndpoints returns the endpoints of one service now. Unknown
	// services return an error wrapping ErrNotFound.
	ListEndpoints(ctx context.Context, svc Service) ([]Endpoint, error)
	// Watch calls send for every change until ctx is done, then returns
	// nil. An error from send means the receiver is gone: return it. Any
	// number of Watch calls may run at once. Watch sends changes only, not
	// the initial state (the host lists after subscribing); it may send the
	// current health first.
	Watch(ctx context.Context, send func(Event) error) error
}

// Info describes a plugin.
type Info struct {
	Name        string
	Version     string
	Description string
}

// Service names a mesh service.
type Service struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (s Service) String() string { return s.Namespace + "/" + s.Name }

// Endpoint is one address serving a service.
type Endpoint struct {
	IP     netip.Addr
	Port   uint16
	Labels map[string]string
}

// String returns "ip:port".
func (e Endpoint) String() string { return netip.AddrPortFrom(e.IP, e.Port).String() }

// Event is one change reported by Watch. Exactly one of its forms is used:
// Updated (the complete current endpoints of Service), Deleted (Service is
// gone) or Health (the provider's own health changed).
type Event struct {
	Service   Service
	Endpoints []Endpoint
	Deleted   bool
	Health    *Health
}

// Updated returns the event for the complete current endpoints of svc.
func Updated(svc Service, eps []Endpoint) Event { return Event{Service: svc, Endpoints: eps} }

// Deleted returns the event for a service the provider no longer knows.
func Deleted(svc Service) Event { return Event{Service: svc, Deleted: true} }

// HealthChanged returns the event for a change in the provider's health.
// A nil err means healthy. The message should name what failed and the fix.
func HealthChanged(err error) Event {
	if err == nil {
		return Event{Health: &Health{Healthy: true}}
	}
	return Event{Health: &Health{Healthy: false, Message: err.Error()}}
}

// Health is a provider's view of its own health. An unhealthy provider
// keeps serving its last good state.
type Health struct {
	Healthy bool
	Message string
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidateName checks that s is a DNS-1123 label, as service names and
// namespaces must be. what names the thing for the error message.
func ValidateName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > 63:
		return fmt.Errorf("%s %q is longer than 63 characters", what, s)
	case !dns1123Label.MatchString(s):
		return fmt.Errorf("%s %q is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)", what, s)
	}
	return nil
}

// Validate checks a service name and namespace.
func (s Service) Validate() error {
	if err := ValidateName("namespace", s.Namespace); err != nil {
		return err
	}
	return ValidateName("service name", s.Name)
}

// Validate checks an endpoint's address and port.
func (e Endpoint) Validate() error {
	if !e.IP.IsValid() {
		return fmt.Errorf("endpoint has no IP address")
	}
	if e.IP.Zone() != "" {
		return fmt.Errorf("endpoint %s: IPv6 zones are not supported", e.IP)
	}
	if e.Port == 0 {
		return fmt.Errorf("endpoint %s: port 0 is not a valid port (use 1-65535)", e.IP)
	}
	return nil
}

// DecodeConfig decodes a provider's JSON config strictly into v (a pointer
// to a struct): unknown fields are errors, and so are keys that match a
// field only when case is ignored (encoding/json would accept "kubeConfig"
// for "kubeconfig" silently). The returned error wraps ErrInvalidConfig and
// names the offending key.
func DecodeConfig(config []byte, v any) error {
	if len(config) == 0 || string(config) == "null" {
		config = []byte("{}")
	}
	var raw any
	if err := json.Unmarshal(config, &raw); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.TrimPrefix(err.Error(), "json: "))
	}
	if err := checkKeyCase(raw, reflect.TypeOf(v), ""); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// checkKeyCase walks decoded JSON alongside the Go type it decodes into and
// fails on an object key that names a struct field with different case.
func checkKeyCase(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch val := raw.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			for key, child := range val {
				if ft, ok := fields[key]; ok {
					if err := checkKeyCase(child, ft, path+key+"."); err != nil {
						return err
					}
					continue
				}
				for name := range fields {
					if strings.EqualFold(name, key) {
						return fmt.Errorf("unknown field %q (did you mean %q? keys are case-sensitive)", path+key, path+name)
					}
				}
			}
		case reflect.Map:
			for key, child := range val {
				if err := checkKeyCase(child, t.Elem(), path+key+"."); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, child := range val {
				if err := checkKeyCase(child, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonFields maps the JSON names of a struct's fields (including embedded
// structs' promoted fields) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
