// Package k8stest holds the tests of jaild's Kubernetes manifests and Helm
// chart; it has no code of its own. See manifests_test.go.
package k8stest
