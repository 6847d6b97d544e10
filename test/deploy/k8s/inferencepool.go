package main

// InferencePool (inference.networking.k8s.io/v1) as a Go struct of our own, mirroring the fields
// of the upstream type (sigs.k8s.io/gateway-api-inference-extension api/v1, InferencePool and
// its spec and status). Not the upstream module: the Go module proxy refused it (403) when this
// was written, so a field the upstream type lacks is refused here only as far as this mirror is
// faithful. Swap in the upstream import when the proxy serves it.

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferencePoolSpec   `json:"spec,omitempty"`
	Status            InferencePoolStatus `json:"status,omitempty"`
}

type InferencePoolSpec struct {
	Selector          LabelSelector     `json:"selector"`
	TargetPorts       []Port            `json:"targetPorts"`
	EndpointPickerRef EndpointPickerRef `json:"endpointPickerRef"`
}

type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type Port struct {
	Number int32 `json:"number"`
}

type EndpointPickerRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        string  `json:"kind,omitempty"`
	Name        string  `json:"name"`
	Port        *Port   `json:"port,omitempty"`
	FailureMode string  `json:"failureMode,omitempty"`
}

type InferencePoolStatus struct {
	Parents []ParentStatus `json:"parents,omitempty"`
}

type ParentStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	ParentRef  ParentReference    `json:"parentRef"`
}

type ParentReference struct {
	Group     *string `json:"group,omitempty"`
	Kind      string  `json:"kind,omitempty"`
	Name      string  `json:"name"`
	Namespace string  `json:"namespace,omitempty"`
}

func newInferencePool() any { return &InferencePool{} }
