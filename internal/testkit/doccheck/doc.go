// Package doccheck holds the test that keeps the Go snippets of README.md
// and docs/ true: each one must be quoted from Go code that compiles (an
// Example function or another file of the module), so none can drift
// from the API.
package doccheck
