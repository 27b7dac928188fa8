package connectint

// TableCells renders an outcome as docs/connect.md prints it.
var TableCells = tableCells

// Rendering is how connect renders an outcome.
var Rendering = rendering
