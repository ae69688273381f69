//go:build tools

// The three cert-manager binaries the testbed runs; imported so `go mod tidy` keeps their
// dependencies in go.sum.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector"
	_ "github.com/cert-manager/cert-manager/cmd/controller"
	_ "github.com/cert-manager/cert-manager/cmd/webhook"
)
