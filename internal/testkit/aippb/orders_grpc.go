package aippb

import (
	"context"

	"google.golang.org/grpc"
)

// Full names of the Orders service and its methods.
const (
	// OrdersServiceName is the full name of the Orders service.
	OrdersServiceName = "opledger.testkit.aip.v1.Orders"
	// CreateOrderMethod is the full method name of Orders.CreateOrder.
	CreateOrderMethod = "/opledger.testkit.aip.v1.Orders/CreateOrder"
	// ShipOrderMethod is the full method name of Orders.ShipOrder.
	ShipOrderMethod = "/opledger.testkit.aip.v1.Orders/ShipOrder"
	// GetOrderMethod is the full method name of Orders.GetOrder.
	GetOrderMethod = "/opledger.testkit.aip.v1.Orders/GetOrder"
	// CancelOrderMethod is the full method name of Orders.CancelOrder.
	CancelOrderMethod = "/opledger.testkit.aip.v1.Orders/CancelOrder"
)

// OrdersServer is the server API of the Orders methods the tests serve.
type OrdersServer interface {
	// CreateOrder places one order (a keyed mutation by its request_id).
	CreateOrder(context.Context, *CreateOrderRequest) (*Order, error)
}

// RegisterOrdersServer registers srv with s.
func RegisterOrdersServer(s grpc.ServiceRegistrar, srv OrdersServer) {
	s.RegisterService(&OrdersServiceDesc, srv)
}

func createOrderHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(CreateOrderRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(OrdersServer).CreateOrder(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: CreateOrderMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(OrdersServer).CreateOrder(ctx, req.(*CreateOrderRequest))
	}
	return interceptor(ctx, in, info, handler)
}

// OrdersServiceDesc is the grpc.ServiceDesc of the Orders methods the
// tests serve (CreateOrder).
var OrdersServiceDesc = grpc.ServiceDesc{
	ServiceName: OrdersServiceName,
	HandlerType: (*OrdersServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "CreateOrder", Handler: createOrderHandler}},
	Metadata:    "orders.proto",
}

// OrdersClient is the client API of the Orders methods the tests call.
type OrdersClient interface {
	// CreateOrder places one order.
	CreateOrder(ctx context.Context, in *CreateOrderRequest, opts ...grpc.CallOption) (*Order, error)
}

type ordersClient struct{ cc grpc.ClientConnInterface }

// NewOrdersClient returns a client of the Orders service on cc.
func NewOrdersClient(cc grpc.ClientConnInterface) OrdersClient { return &ordersClient{cc} }

func (c *ordersClient) CreateOrder(ctx context.Context, in *CreateOrderRequest, opts ...grpc.CallOption) (*Order, error) {
	out := new(Order)
	if err := c.cc.Invoke(ctx, CreateOrderMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
