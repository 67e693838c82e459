// Package kubernetes holds the tests of goroce's Kubernetes manifests: every
// manifest decodes strictly into the Kubernetes API types, every flag they
// pass to roced and the tools is one those binaries accept, and the
// DaemonSet's roced and the example client work together on one node played on
// a loopback address (TestNode). It is its own module, so the main module does
// not depend on k8s.io.
package kubernetes
