package spec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Kubernetes core Services (apiVersion v1, kind Service) are mesh Services
// as they are written for Kubernetes: name, namespace and ports mean what
// they mean there; what has no meaning for machines (selector, type,
// clusterIP, node ports, ...) is kept as applied and reported as ignored.
const (
	// APIVersionCore is the apiVersion of Kubernetes core documents.
	APIVersionCore = "v1"
	// AnnotationServiceAccount sets the service account a v1 Service's
	// workloads run as (default: the Service's name), as
	// spec.serviceAccount does for an osm-vm.io Service.
	AnnotationServiceAccount = "osm-vm.io/service-account"
	// appProtocolH2C is Kubernetes' name for HTTP/2 without TLS.
	appProtocolH2C = "kubernetes.io/h2c"
)

var reflectTypeOfObjectMeta = reflect.TypeFor[ObjectMeta]()

// form is a further apiVersion a kind is accepted in, decoded into a Go
// type of its own (stored and returned in that form).
type form struct {
	apiVersion, kind string
	newObject        func() Object
}

// forms lists the apiVersions accepted beside each kind's own (kinds).
var forms = slices.Concat([]form{
	{APIVersionCore, KindService, func() Object { return &KubeService{} }},
}, gatewayForms, gatewayL4Forms)

// newObjectFor returns an empty document of kind ki in apiVersion, false
// when ki is not accepted in that apiVersion.
func newObjectFor(ki kindInfo, apiVersion string) (Object, bool) {
	if apiVersion == ki.apiVersion {
		return ki.newObject(), true
	}
	for _, f := range forms {
		if f.kind == ki.kind && f.apiVersion == apiVersion {
			return f.newObject(), true
		}
	}
	return nil, false
}

// apiVersionsOf returns the apiVersions kind is accepted in, quoted.
func apiVersionsOf(ki kindInfo) string {
	vs := []string{fmt.Sprintf("%q", ki.apiVersion)}
	for _, f := range forms {
		if f.kind == ki.kind {
			vs = append(vs, fmt.Sprintf("%q", f.apiVersion))
		}
	}
	return strings.Join(vs, " or ")
}

// KubeService is a Kubernetes core v1 Service used as a mesh Service.
type KubeService struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta     `json:"metadata"`
	Spec     corev1.ServiceSpec `json:"spec"`
	// Status carries the VIP in responses; what Kubernetes reports there
	// is accepted and dropped on apply.
	Status *KubeServiceStatus `json:"status,omitempty"`
	// dropped names what setDefaults removed, for the apply warning.
	dropped []string
}

// KubeObjectMeta is ObjectMeta with the fields the Kubernetes API server
// fills, so `kubectl get -o yaml` output applies: they are accepted,
// reported as ignored and not stored.
type KubeObjectMeta struct {
	ObjectMeta                 `json:",inline"`
	GenerateName               any `json:"generateName,omitempty"`
	UID                        any `json:"uid,omitempty"`
	ResourceVersion            any `json:"resourceVersion,omitempty"`
	Generation                 any `json:"generation,omitempty"`
	CreationTimestamp          any `json:"creationTimestamp,omitempty"`
	DeletionTimestamp          any `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds any `json:"deletionGracePeriodSeconds,omitempty"`
	OwnerReferences            any `json:"ownerReferences,omitempty"`
	Finalizers                 any `json:"finalizers,omitempty"`
	ManagedFields              any `json:"managedFields,omitempty"`
	SelfLink                   any `json:"selfLink,omitempty"`
}

// KubeServiceStatus is the status of a KubeService: the VIP in responses.
type KubeServiceStatus struct {
	VIP          string `json:"vip,omitempty"`
	LoadBalancer any    `json:"loadBalancer,omitempty"`
	Conditions   any    `json:"conditions,omitempty"`
}

func (s *KubeService) Key() Key            { return keyOf(s.TypeMeta, s.Metadata.ObjectMeta) }
func (s *KubeService) meta() *ObjectMeta   { return &s.Metadata.ObjectMeta }
func (s *KubeService) typeMeta() *TypeMeta { return &s.TypeMeta }

// setDefaults drops what the API server fills; the spec stays as applied.
func (s *KubeService) setDefaults() {
	b, _ := json.Marshal(s.Metadata)
	var md map[string]any
	_ = json.Unmarshal(b, &md)
	for _, k := range sortedKeys(md) {
		if _, ours := jsonFields(reflectTypeOfObjectMeta)[k]; !ours {
			s.dropped = append(s.dropped, "metadata."+k)
		}
	}
	if s.Status != nil && (s.Status.LoadBalancer != nil || s.Status.Conditions != nil) {
		s.dropped = append(s.dropped, "status")
	}
	s.Status = nil
	s.Metadata = KubeObjectMeta{ObjectMeta: s.Metadata.ObjectMeta}
}

func (s *KubeService) validate(v *validator) {
	// The mesh form is validated as an osm-vm.io Service would be, with
	// the fields named as this document names them.
	ms, errs := s.meshService()
	for _, e := range errs {
		v.errorf(e.field, "%s", e.msg)
	}
	if len(errs) > 0 {
		return
	}
	sub := &validator{doc: v.doc}
	ms.validate(sub)
	for _, fe := range sub.errs {
		field := fe.Field
		if field == "spec.serviceAccount" {
			field = "metadata.annotations." + AnnotationServiceAccount
		}
		v.errorf(field, "%s", fe.Message)
	}
}

type fieldProblem struct{ field, msg string }

// meshService converts s to the mesh Service it defines.
func (s *KubeService) meshService() (*Service, []fieldProblem) {
	ms := &Service{
		TypeMeta: TypeMeta{APIVersion: APIVersionOSM, Kind: KindService},
		Metadata: s.Metadata.ObjectMeta,
		Spec:     ServiceSpec{ServiceAccount: s.Metadata.Annotations[AnnotationServiceAccount]},
	}
	var errs []fieldProblem
	for i, p := range s.Spec.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			errs = append(errs, fieldProblem{f + ".protocol", fmt.Sprintf("protocol %s is not supported: the mesh carries TCP only (remove the port or set protocol: TCP)", p.Protocol)})
		}
		mp := ServicePort{Name: p.Name, Port: int(p.Port)}
		switch {
		case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal != "":
			errs = append(errs, fieldProblem{f + ".targetPort", fmt.Sprintf("%q names a container port, which machines do not have: give the application's port number", p.TargetPort.StrVal)})
		case p.TargetPort.Type == intstr.Int:
			mp.TargetPort = int(p.TargetPort.IntVal)
		}
		proto, err := meshAppProtocol(p)
		if err != "" {
			errs = append(errs, fieldProblem{f + ".appProtocol", err})
		}
		mp.AppProtocol = proto
		ms.Spec.Ports = append(ms.Spec.Ports, mp)
	}
	ms.setDefaults()
	return ms, errs
}

// meshAppProtocol maps a Kubernetes port to http, tcp or grpc: by its
// appProtocol (http, tcp, grpc, kubernetes.io/h2c as grpc: HTTP/2 to the
// application), else by its name as OSM and Istio do (http, http-*, grpc,
// grpc-*, tcp, tcp-*, and https, tls, tls-* as tcp: the mesh passes TLS
// through), else http.
func meshAppProtocol(p corev1.ServicePort) (string, string) {
	if p.AppProtocol != nil {
		switch a := strings.ToLower(*p.AppProtocol); a {
		case "http", "tcp", "grpc":
			return a, ""
		case appProtocolH2C:
			return "grpc", ""
		case "https", "tls", "kubernetes.io/wss":
			return "tcp", ""
		default:
			return "", fmt.Sprintf("unsupported appProtocol %q: want http, grpc, tcp, %s (HTTP/2, served as grpc) or https (passed through as tcp)", *p.AppProtocol, appProtocolH2C)
		}
	}
	name := strings.ToLower(p.Name)
	for _, pre := range []struct{ prefix, proto string }{{"grpc", "grpc"}, {"http2", "grpc"}, {"https", "tcp"}, {"http", "http"}, {"tcp", "tcp"}, {"tls", "tcp"}} {
		if name == pre.prefix || strings.HasPrefix(name, pre.prefix+"-") {
			return pre.proto, ""
		}
	}
	return "http", ""
}

// ignoredFields lists the fields of s that mean nothing for machines, as
// field paths, so apply can say so.
func (s *KubeService) ignoredFields() []string {
	out := slices.Clone(s.dropped)
	spec := map[string]any{}
	b, _ := json.Marshal(s.Spec)
	_ = json.Unmarshal(b, &spec)
	for _, k := range sortedKeys(spec) {
		if k != "ports" {
			out = append(out, "spec."+k)
		}
	}
	for i, p := range s.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, fmt.Sprintf("spec.ports[%d].nodePort", i))
		}
	}
	return out
}

// applyWarnings says which fields apply ignores.
func (s *KubeService) applyWarnings(v *validator) {
	if ign := s.ignoredFields(); len(ign) > 0 {
		v.warnf("", "ignored (no meaning for machines): %s", strings.Join(ign, ", "))
	}
}

// serviceOf returns the mesh Service o defines, if it is one.
func serviceOf(o Object) (*Service, bool) {
	switch s := o.(type) {
	case *Service:
		return s, true
	case *KubeService:
		ms, _ := s.meshService()
		return ms, true
	}
	return nil, false
}

// setVIP fills the status of a copy for responses.
func setVIP(o Object, vip string) {
	switch s := o.(type) {
	case *Service:
		s.Status = &ServiceStatus{VIP: vip}
	case *KubeService:
		s.Status = &KubeServiceStatus{VIP: vip}
	}
}
