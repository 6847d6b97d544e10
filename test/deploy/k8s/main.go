// Decodes the Kubernetes manifests under deploy/kubernetes strictly (unknown fields refused) into
// the upstream Go types: k8s.io/api (apps/v1, core/v1, rbac/v1), Gateway API v1 (HTTPRoute) and
// the Gateway API Inference Extension's InferencePool.
//
// Usage: k8scheck FILE...  Prints one "ok FILE KIND NAME" or "FAIL ..." line per document and
// exits 1 when any failed (test/deploy/manifests.test.ts runs it).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// newObject is the Go type a manifest of apiVersion/kind decodes into.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "gateway.networking.k8s.io/v1/HTTPRoute":
		return &gatewayv1.HTTPRoute{}
	case "inference.networking.k8s.io/v1/InferencePool":
		return newInferencePool()
	}
	return nil
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func main() {
	failed := 0
	for _, file := range os.Args[1:] {
		text, err := os.ReadFile(file)
		if err != nil {
			fmt.Printf("FAIL %s: %v\n", file, err)
			failed++
			continue
		}
		for i, doc := range separator.Split(string(text), -1) {
			if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
				continue
			}
			if err := decode([]byte(doc)); err != nil {
				fmt.Printf("FAIL %s document %d: %v\n", file, i, err)
				failed++
			} else {
				fmt.Printf("ok %s document %d\n", file, i)
			}
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

var comment = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(b []byte) []byte { return comment.ReplaceAll(b, nil) }

func decode(doc []byte) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	var head struct{ APIVersion, Kind string }
	if err := json.Unmarshal(js, &head); err != nil {
		return err
	}
	obj := newObject(head.APIVersion, head.Kind)
	if obj == nil {
		return fmt.Errorf("no Go type known for %s %s", head.APIVersion, head.Kind)
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(obj); err != nil {
		return fmt.Errorf("%s %s: %v", head.APIVersion, head.Kind, err)
	}
	return nil
}
