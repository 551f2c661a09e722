package legacy12

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A request that is not the protobuf its method takes is answered
// INVALID_ARGUMENT, naming the method, the message and what is wrong
// with it. grpc-go answers any error of a codec's Unmarshal INTERNAL, so
// the codec alone cannot say so: the server's codec (codec, set by
// NewServer with grpc.ForceServerCodecV2, registered nowhere else) hands
// a request over as the bytes that came (wire), and each method's
// handler (serviceDesc) decodes them itself (decode). Responses are
// marshalled as grpc's own codec does.

// wire is a request's bytes as they came, before decode.
type wire []byte

// codec is the service's gRPC codec.
type codec struct{}

// Name is the content-subtype of the default codec: the 1.2 client sends
// application/grpc, which is protobuf.
func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("legacy12: marshal %T: not a protobuf message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal copies the request's bytes into a *wire (data is freed once
// it returns); it decodes into any other protobuf message as grpc's own
// codec does.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v := v.(type) {
	case *wire:
		*v = data.Materialize()
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), v)
	}
	return fmt.Errorf("legacy12: unmarshal into %T: not a protobuf message", v)
}

// serviceDesc is Control_ServiceDesc whose handlers take their request
// through decode: the generated handlers, with a dec of its own.
func serviceDesc() *grpc.ServiceDesc {
	d := Control_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i, m := range d.Methods {
		h, name := m.Handler, m.MethodName
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decode(dec, name, v) }, in)
		}
	}
	return &d
}

// decode reads the request of method through dec (the bytes as they
// came, codec.Unmarshal) and decodes them into v, a request message: an
// undecodable one is INVALID_ARGUMENT naming what is wrong.
func decode(dec func(any) error, method string, v any) error {
	var w wire
	if err := dec(&w); err != nil {
		return err
	}
	m, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "legacy12: %s decodes into %T, not a protobuf message", method, v)
	}
	return decodeWire(w, method, m)
}

// decodeWire decodes w into m, the request of method.
func decodeWire(w wire, method string, m proto.Message) error {
	if err := proto.Unmarshal(w, m); err != nil {
		proto.Reset(m)
		return status.Errorf(codes.InvalidArgument, "the %s request (%d bytes) is not a valid %s protobuf message: %v; send the message scistream.proto defines, as the 1.2 client does", method, len(w), m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
