package envoy

import (
	"errors"
	"fmt"
	"slices"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// Types that appear inside Any in what this package renders; imported
	// here so Validate can unpack them wherever it is called from.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Validate checks m with its protoc-gen-validate rules (ValidateAll) and
// does the same for every message packed in an Any anywhere inside it,
// recursively. An Any of a type not linked into the binary is an error.
func Validate(m proto.Message) error {
	var errs []error
	walk(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().FullName()), &errs)
	return errors.Join(errs...)
}

type validatorAll interface{ ValidateAll() error }

func walk(m protoreflect.Message, path string, errs *[]error) {
	if !m.IsValid() {
		return
	}
	msg := m.Interface()
	if a, ok := msg.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: unpack Any %s: %w", path, a.GetTypeUrl(), err))
			return
		}
		walk(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().FullName())+">", errs)
		return
	}
	if v, ok := msg.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), errs)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface()), errs)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walk(v.Message(), name, errs)
		}
		return true
	})
}

// ValidateBootstrap is Validate plus the cross-references ValidateAll
// cannot see: the ADS gRPC service names a static cluster, and every static
// cluster name is unique.
func ValidateBootstrap(b *bootstrapv3.Bootstrap) error {
	if err := Validate(b); err != nil {
		return err
	}
	var names []string
	for _, c := range b.GetStaticResources().GetClusters() {
		if slices.Contains(names, c.GetName()) {
			return fmt.Errorf("bootstrap: static cluster %q defined twice", c.GetName())
		}
		names = append(names, c.GetName())
	}
	ads := b.GetDynamicResources().GetAdsConfig()
	if ads == nil {
		return errors.New("bootstrap: no ads_config")
	}
	for _, g := range ads.GetGrpcServices() {
		if n := g.GetEnvoyGrpc().GetClusterName(); !slices.Contains(names, n) {
			return fmt.Errorf("bootstrap: ADS names cluster %q, which is not a static cluster (have %v)", n, names)
		}
	}
	if b.GetNode().GetId() == "" || b.GetNode().GetCluster() == "" {
		return errors.New("bootstrap: node id and cluster must be set")
	}
	return nil
}
