package httpint

// TableCells renders an outcome as docs/http.md's table prints it.
var TableCells = tableCells
