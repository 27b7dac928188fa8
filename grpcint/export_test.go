package grpcint

// TableCells renders an outcome as docs/grpc.md's table prints it.
var TableCells = tableCells

// ErrorMap is the kit's error map, one row per reason (docs/grpc.md).
var ErrorMap = errorMap

// Mapping is one row of ErrorMap.
type Mapping = mapping

// Rendering is how gRPC renders an outcome.
var Rendering = rendering
