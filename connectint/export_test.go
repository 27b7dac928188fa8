package connectint

// TableCells renders an outcome as docs/connect.md prints it.
var TableCells = tableCells
