//go:build tools

// Package tools pins helm as a dependency of this module; `cargo xtask helm build` builds
// helm.sh/helm/v3/cmd/helm from here.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
