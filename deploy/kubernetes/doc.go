// Package kubernetes holds the tests of goroce's Kubernetes manifests: every
// manifest decodes strictly into the Kubernetes API types, and every flag they
// pass to roced and the tools is one those binaries accept. It is its own
// module, so the main module does not depend on k8s.io.
package kubernetes
