// Package k8stest holds the tests of jaild's Kubernetes manifests and Helm
// chart; it has no code of its own. See manifests_test.go, and
// apiserver_test.go for the dry run against a real kube-apiserver, whose
// programs kube/fetch.sh (make kube-tools) builds and caches.
package k8stest
