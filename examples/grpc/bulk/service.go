// Package bulk is a gRPC service that moves verified bytes, with a hand-written service
// descriptor and a raw-bytes codec (no generated code):
//
//   - Exchange (unary): the request is a message of N bytes, the reply a message of the
//     same size;
//   - Upload (client streaming): the client streams messages numbered 0, 1, 2, ...; the
//     server checks each and, when the client closes, replies with the count;
//   - Whoami (unary): the reply says what the server saw of the RPC's connection
//     (smccreds.Info).
//
// A message of size N is an 8-byte sequence number followed by N-8 bytes of a
// sequence-dependent pattern; every receiver checks every byte.
package bulk

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

// ServiceName is the service's full name.
const ServiceName = "smcloop.examples.Bulk"

// The methods' full names.
const (
	MethodExchange = "/" + ServiceName + "/Exchange"
	MethodUpload   = "/" + ServiceName + "/Upload"
	MethodWhoami   = "/" + ServiceName + "/Whoami"
)

// ReplyBit is set in the sequence number of an Exchange reply.
const ReplyBit = 1 << 63

// Service is the server side. The zero value is ready to register.
type Service struct{}

// serviceDesc is what protoc-gen-go-grpc would generate for the service.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Exchange", Handler: unaryHandler(MethodExchange, (*Service).exchange)},
		{MethodName: "Whoami", Handler: unaryHandler(MethodWhoami, (*Service).whoami)},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Upload", Handler: uploadHandler, ClientStreams: true},
	},
}

// ServerOption makes a server use the service's codec; pass it to grpc.NewServer.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// Register registers the service on s, which must have been made with ServerOption.
func Register(s *grpc.Server, svc *Service) { s.RegisterService(&serviceDesc, svc) }

func unaryHandler(method string, h func(*Service, context.Context, []byte) ([]byte, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		var req []byte
		if err := dec(&req); err != nil {
			return nil, err
		}
		svc := srv.(*Service)
		call := func(ctx context.Context, req any) (any, error) {
			reply, err := h(svc, ctx, *req.(*[]byte))
			if err != nil {
				return nil, err
			}
			return &reply, nil
		}
		if interceptor == nil {
			return call(ctx, &req)
		}
		return interceptor(ctx, &req, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, call)
	}
}

func (*Service) exchange(_ context.Context, req []byte) ([]byte, error) {
	seq, err := CheckMessage(req)
	if err != nil {
		return nil, status.Error(codes.DataLoss, err.Error())
	}
	if seq&ReplyBit != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "bulk: request %#x has the reply bit", seq)
	}
	return AppendMessage(req[:0], seq|ReplyBit, len(req)), nil
}

// Peer is Whoami's reply: what the server saw of the connection.
type Peer struct {
	AuthType string `json:"auth_type"`
	Mode     string `json:"mode"`
	SMC      bool   `json:"smc"`
}

func (*Service) whoami(ctx context.Context, _ []byte) ([]byte, error) {
	var p Peer
	if info, ok := smccreds.FromContext(ctx); ok {
		p = Peer{AuthType: info.AuthType(), Mode: info.Mode, SMC: info.SMC}
	}
	return json.Marshal(p)
}

func uploadHandler(_ any, stream grpc.ServerStream) error {
	var (
		msg   []byte
		count uint64
		total uint64
	)
	for {
		err := stream.RecvMsg(&msg)
		if errors.Is(err, io.EOF) {
			reply := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, count), total)
			return stream.SendMsg(&reply)
		}
		if err != nil {
			return err
		}
		seq, err := CheckMessage(msg)
		if err != nil {
			return status.Error(codes.DataLoss, err.Error())
		}
		if seq != count {
			return status.Errorf(codes.DataLoss, "bulk: message %d arrived as number %d", seq, count)
		}
		count++
		total += uint64(len(msg))
	}
}

// Client is the client side of the service.
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a client calling the service over cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// Exchanger makes Exchange calls of one size, reusing its buffers.
type Exchanger struct {
	c          *Client
	size       int
	req, reply []byte
}

// Exchanger returns an Exchanger for messages of size bytes (at least HeaderSize).
func (c *Client) Exchanger(size int) *Exchanger {
	return &Exchanger{c: c, size: size, req: make([]byte, 0, size)}
}

// Exchange sends message seq and checks the reply.
func (e *Exchanger) Exchange(ctx context.Context, seq uint64, opts ...grpc.CallOption) error {
	e.req = AppendMessage(e.req[:0], seq, e.size)
	opts = append(opts, grpc.ForceCodecV2(Codec{}))
	if err := e.c.cc.Invoke(ctx, MethodExchange, &e.req, &e.reply, opts...); err != nil {
		return err
	}
	got, err := CheckMessage(e.reply)
	if err != nil {
		return err
	}
	if got != seq|ReplyBit || len(e.reply) != e.size {
		return fmt.Errorf("bulk: reply to %d is %d bytes numbered %#x, want %d bytes numbered %#x", seq, len(e.reply), got, e.size, seq|ReplyBit)
	}
	return nil
}

// Whoami asks the server what it saw of the connection.
func (c *Client) Whoami(ctx context.Context, opts ...grpc.CallOption) (Peer, error) {
	var req, reply []byte
	opts = append(opts, grpc.ForceCodecV2(Codec{}))
	if err := c.cc.Invoke(ctx, MethodWhoami, &req, &reply, opts...); err != nil {
		return Peer{}, err
	}
	var p Peer
	err := json.Unmarshal(reply, &p)
	return p, err
}

// Uploader is an open Upload stream.
type Uploader struct {
	stream grpc.ClientStream
	size   int
	next   uint64
	msg    []byte
}

// Upload opens an Upload stream of messages of size bytes.
func (c *Client) Upload(ctx context.Context, size int, opts ...grpc.CallOption) (*Uploader, error) {
	opts = append(opts, grpc.ForceCodecV2(Codec{}))
	stream, err := c.cc.NewStream(ctx, &serviceDesc.Streams[0], MethodUpload, opts...)
	if err != nil {
		return nil, err
	}
	return &Uploader{stream: stream, size: size, msg: make([]byte, 0, size)}, nil
}

// Send sends the next message.
func (u *Uploader) Send() error {
	u.msg = AppendMessage(u.msg[:0], u.next, u.size)
	if err := u.stream.SendMsg(&u.msg); err != nil {
		return err
	}
	u.next++
	return nil
}

// Close ends the stream and returns what the server counted, checking that it got every
// message sent.
func (u *Uploader) Close() (count, bytes uint64, err error) {
	if err := u.stream.CloseSend(); err != nil {
		return 0, 0, err
	}
	var reply []byte
	if err := u.stream.RecvMsg(&reply); err != nil {
		return 0, 0, err
	}
	if len(reply) != 16 {
		return 0, 0, fmt.Errorf("bulk: upload reply of %d bytes, want 16", len(reply))
	}
	count, bytes = binary.LittleEndian.Uint64(reply), binary.LittleEndian.Uint64(reply[8:])
	if count != u.next || bytes != u.next*uint64(u.size) {
		return count, bytes, fmt.Errorf("bulk: server counted %d messages, %d bytes; sent %d, %d bytes", count, bytes, u.next, u.next*uint64(u.size))
	}
	return count, bytes, nil
}
