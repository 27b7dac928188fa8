// Package doccheck holds the test that keeps the Go snippets of README.md
// and docs/ true: each one must be quoted from Go code that compiles (an
// Example function or another file of the module), so none can drift
// from the API. Its other tests hold the docs to the code in the same
// way; one of them, that every doc link of the packages' doc comments
// ([Name], [Type.Method], [pkg.Name]) names a declaration that exists;
// another, that the package comment of every public package names one of
// its constructors as a doc link.
package doccheck
