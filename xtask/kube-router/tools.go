//go:build tools

// Package tools pins kube-router as a dependency of this module; `cargo xtask kube-router build`
// builds github.com/cloudnativelabs/kube-router/v2/cmd/kube-router (its main package) from here.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
