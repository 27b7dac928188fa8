package grpcint

// TableCells renders an outcome as docs/grpc.md's table prints it.
var TableCells = tableCells
