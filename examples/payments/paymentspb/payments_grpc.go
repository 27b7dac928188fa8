package paymentspb

import (
	"context"

	"google.golang.org/grpc"
)

// Full method names of the Payments service.
const (
	// ServiceName is the full name of the Payments service.
	ServiceName = "opledger.examples.payments.v1.Payments"
	// TransferMethod is the full method name of Payments.Transfer.
	TransferMethod = "/opledger.examples.payments.v1.Payments/Transfer"
	// GetTransferMethod is the full method name of Payments.GetTransfer.
	GetTransferMethod = "/opledger.examples.payments.v1.Payments/GetTransfer"
)

// PaymentsServer is the server API of the Payments service.
type PaymentsServer interface {
	// Transfer records one transfer (a keyed mutation).
	Transfer(context.Context, *TransferRequest) (*TransferReply, error)
	// GetTransfer reads one transfer.
	GetTransfer(context.Context, *GetTransferRequest) (*TransferReply, error)
}

// RegisterPaymentsServer registers srv with s.
func RegisterPaymentsServer(s grpc.ServiceRegistrar, srv PaymentsServer) {
	s.RegisterService(&PaymentsServiceDesc, srv)
}

func transferHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(TransferRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(PaymentsServer).Transfer(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: TransferMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(PaymentsServer).Transfer(ctx, req.(*TransferRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func getTransferHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(GetTransferRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(PaymentsServer).GetTransfer(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: GetTransferMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(PaymentsServer).GetTransfer(ctx, req.(*GetTransferRequest))
	}
	return interceptor(ctx, in, info, handler)
}

// PaymentsServiceDesc is the grpc.ServiceDesc of the Payments service.
var PaymentsServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*PaymentsServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Transfer", Handler: transferHandler},
		{MethodName: "GetTransfer", Handler: getTransferHandler},
	},
	Metadata: "payments.proto",
}

// PaymentsClient is the client API of the Payments service.
type PaymentsClient interface {
	// Transfer records one transfer (a keyed mutation).
	Transfer(ctx context.Context, in *TransferRequest, opts ...grpc.CallOption) (*TransferReply, error)
	// GetTransfer reads one transfer.
	GetTransfer(ctx context.Context, in *GetTransferRequest, opts ...grpc.CallOption) (*TransferReply, error)
}

type paymentsClient struct{ cc grpc.ClientConnInterface }

// NewPaymentsClient returns a client of the Payments service on cc.
func NewPaymentsClient(cc grpc.ClientConnInterface) PaymentsClient { return &paymentsClient{cc} }

func (c *paymentsClient) Transfer(ctx context.Context, in *TransferRequest, opts ...grpc.CallOption) (*TransferReply, error) {
	out := new(TransferReply)
	if err := c.cc.Invoke(ctx, TransferMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *paymentsClient) GetTransfer(ctx context.Context, in *GetTransferRequest, opts ...grpc.CallOption) (*TransferReply, error) {
	reply := new(TransferReply)
	if err := c.cc.Invoke(ctx, GetTransferMethod, in, reply, opts...); err != nil {
		return nil, err
	}
	return reply, nil
}
