package paymentspb

import (
	"context"

	"google.golang.org/grpc"
)

// Full method names of the Fraud service.
const (
	// FraudServiceName is the full name of the Fraud service.
	FraudServiceName = "opledger.examples.payments.v1.Fraud"
	// FraudCheckMethod is the full method name of Fraud.Check.
	FraudCheckMethod = "/opledger.examples.payments.v1.Fraud/Check"
)

// FraudServer is the server API of the Fraud service.
type FraudServer interface {
	// Check records one fraud check (a keyed mutation).
	Check(context.Context, *FraudCheckRequest) (*FraudCheckReply, error)
}

// RegisterFraudServer registers srv with s.
func RegisterFraudServer(s grpc.ServiceRegistrar, srv FraudServer) {
	s.RegisterService(&FraudServiceDesc, srv)
}

func fraudCheckHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(FraudCheckRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(FraudServer).Check(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: FraudCheckMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(FraudServer).Check(ctx, req.(*FraudCheckRequest))
	}
	return interceptor(ctx, in, info, handler)
}

// FraudServiceDesc is the grpc.ServiceDesc of the Fraud service.
var FraudServiceDesc = grpc.ServiceDesc{
	ServiceName: FraudServiceName,
	HandlerType: (*FraudServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Check", Handler: fraudCheckHandler}},
	Metadata:    "payments.proto",
}

// FraudClient is the client API of the Fraud service.
type FraudClient interface {
	// Check records one fraud check (a keyed mutation).
	Check(ctx context.Context, in *FraudCheckRequest, opts ...grpc.CallOption) (*FraudCheckReply, error)
}

type fraudClient struct{ cc grpc.ClientConnInterface }

// NewFraudClient returns a client of the Fraud service on cc.
func NewFraudClient(cc grpc.ClientConnInterface) FraudClient { return &fraudClient{cc} }

func (c *fraudClient) Check(ctx context.Context, in *FraudCheckRequest, opts ...grpc.CallOption) (*FraudCheckReply, error) {
	out := new(FraudCheckReply)
	if err := c.cc.Invoke(ctx, FraudCheckMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
