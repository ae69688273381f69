//go:build tools

// Package tools pins redis_exporter as a dependency of this module; `cargo xtask exporter build`
// builds github.com/oliver006/redis_exporter (its main package) from here.
package tools

import _ "github.com/oliver006/redis_exporter"
