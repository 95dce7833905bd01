package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/osm-vm/osm-vm/provider"
)

// config is an instance's `config` block. See docs/plugins/kubernetes.md.
type config struct {
	// Kubeconfig is the path of a kubeconfig file. Empty means in-cluster
	// configuration (the pod's service account), which needs the
	// KUBERNETES_SERVICE_HOST environment that Kubernetes sets in pods.
	Kubeconfig string `json:"kubeconfig"`
	// Context selects a context of the kubeconfig file; empty means its
	// current-context.
	Context string `json:"context"`
	// Namespaces lists the Kubernetes namespaces to watch; empty means all.
	Namespaces []string `json:"namespaces"`
	// LabelSelector limits the Services that become mesh services, for
	// example "mesh.osm-vm.io/export=true". Empty means every Service.
	LabelSelector string `json:"labelSelector"`
	// NamespaceMap maps a Kubernetes namespace to the mesh namespace its
	// Services join. Namespaces not listed keep their name.
	NamespaceMap map[string]string `json:"namespaceMap"`

	// selector is LabelSelector parsed.
	selector labels.Selector
}

// parseConfig decodes and validates an instance's config block. Errors
// wrap provider.ErrInvalidConfig and name the key and the fix.
func parseConfig(raw []byte) (config, error) {
	var c config
	if err := provider.DecodeConfig(raw, &c); err != nil {
		return config{}, fmt.Errorf("%w (known keys: kubeconfig, context, namespaces, labelSelector, namespaceMap)", err)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", provider.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.Context != "" && c.Kubeconfig == "" {
		return config{}, invalid("context %q is set but kubeconfig is not; set kubeconfig to the file that defines the context, or remove context to use the in-cluster config", c.Context)
	}
	for i, ns := range c.Namespaces {
		if err := provider.ValidateName("namespace", ns); err != nil {
			return config{}, invalid("namespaces[%d]: %v", i, err)
		}
		if slices.Contains(c.Namespaces[:i], ns) {
			return config{}, invalid("namespaces[%d]: %q is listed twice; remove the duplicate", i, ns)
		}
	}
	sel, err := labels.Parse(c.LabelSelector)
	if err != nil {
		return config{}, invalid("labelSelector %q: %v (write it as for kubectl -l, for example \"mesh=enabled,tier!=test\")", c.LabelSelector, err)
	}
	c.selector = sel
	for from, to := range c.NamespaceMap {
		if err := provider.ValidateName("Kubernetes namespace", from); err != nil {
			return config{}, invalid("namespaceMap key: %v", err)
		}
		if err := provider.ValidateName("mesh namespace", to); err != nil {
			return config{}, invalid("namespaceMap[%q]: %v", from, err)
		}
		if len(c.Namespaces) > 0 && !slices.Contains(c.Namespaces, from) {
			return config{}, invalid("namespaceMap[%q]: namespace %q is not in namespaces %q, so it is never watched; add it to namespaces or remove the mapping", from, from, c.Namespaces)
		}
	}
	return c, nil
}

// meshNamespace returns the mesh namespace of Kubernetes namespace ns.
func (c config) meshNamespace(ns string) string {
	if to, ok := c.NamespaceMap[ns]; ok {
		return to
	}
	return ns
}

// watchNamespaces returns the namespaces to run informers for; "" (all
// namespaces) when none are configured.
func (c config) watchNamespaces() []string {
	if len(c.Namespaces) == 0 {
		return []string{""}
	}
	return c.Namespaces
}

// newClientset builds a clientset from the config: the kubeconfig file (and
// context) when set, otherwise the in-cluster service account. It returns
// the API server's address for messages. Errors wrap
// provider.ErrInvalidConfig.
func newClientset(c config, userAgent string) (kubernetes.Interface, string, error) {
	rc, err := restConfig(c)
	if err != nil {
		return nil, "", err
	}
	rc.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("%w: kubernetes client for %s: %v", provider.ErrInvalidConfig, rc.Host, err)
	}
	return cs, rc.Host, nil
}

func restConfig(c config) (*rest.Config, error) {
	if c.Kubeconfig == "" {
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			return nil, fmt.Errorf("%w: kubeconfig is not set and the provider is not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset); set kubeconfig to the path of a kubeconfig file for the cluster", provider.ErrInvalidConfig)
		}
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%w: in-cluster config (kubeconfig is not set): %v; mount the pod's service account token or set kubeconfig", provider.ErrInvalidConfig, err)
		}
		return rc, nil
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %q: %v; set kubeconfig to a readable kubeconfig file", provider.ErrInvalidConfig, c.Kubeconfig, err)
	}
	file, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %q: %v; check the file with `kubectl --kubeconfig FILE config view`", provider.ErrInvalidConfig, c.Kubeconfig, err)
	}
	if c.Context != "" && file.Contexts[c.Context] == nil {
		return nil, fmt.Errorf("%w: context %q is not in kubeconfig %q, which has %q; set context to one of them", provider.ErrInvalidConfig, c.Context, c.Kubeconfig, slices.Sorted(maps.Keys(file.Contexts)))
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*file, c.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		what := fmt.Sprintf("kubeconfig %q", c.Kubeconfig)
		if c.Context != "" {
			what += fmt.Sprintf(" context %q", c.Context)
		}
		fix := "check the file with `kubectl --kubeconfig FILE config view`"
		if errors.Is(err, clientcmd.ErrEmptyConfig) {
			fix = "the file defines no cluster; point kubeconfig at a complete kubeconfig file"
		}
		return nil, fmt.Errorf("%w: %s: %v; %s", provider.ErrInvalidConfig, what, err, fix)
	}
	return rc, nil
}
