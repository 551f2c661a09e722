package legacy12_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"scistream/internal/legacy12"
)

// FuzzService feeds the service's handlers arbitrary messages (any bytes
// decoded as the method's request type, any token) on a real gateway: no
// request shape may crash it, wedge it, or be answered UNKNOWN.
func FuzzService(f *testing.F) {
	e := start(f, 20*time.Millisecond)
	seed := func(m byte, tok byte, msg proto.Message) {
		b, _ := proto.Marshal(msg)
		f.Add(m, tok, b)
	}
	seed(0, 0, &legacy12.Request{Uid: uid(1), Role: "PROD", NumConn: 2, Rate: 10000})
	seed(1, 0, &legacy12.Hello{Uid: uid(1), ProdListeners: []string{"127.0.0.1:7001"}, Role: "PROD"})
	seed(0, 0, &legacy12.Request{Uid: uid(1), Role: "CONS", NumConn: 1})
	seed(2, 0, &legacy12.UpdateTargets{Uid: uid(1), RemoteListeners: []string{"127.0.0.1:5100"}, Role: "CONS"})
	seed(3, 0, &legacy12.Release{Uid: uid(1)})
	seed(0, 1, &legacy12.Request{Uid: uid(2), Role: "PROD", NumConn: -5})
	seed(1, 2, &legacy12.Hello{Uid: uid(2), ProdListeners: []string{"", "[::1]:x", "a:b:c"}, Role: "CONS"})
	f.Add(byte(0), byte(0), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	tokens := []string{aliceToken, "INVALID_TOKEN", "Bearer " + bobToken, ""}
	f.Fuzz(func(t *testing.T, method, tok byte, b []byte) {
		ctx := context.Background()
		if token := tokens[int(tok)%len(tokens)]; token != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", token))
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		switch method % 4 {
		case 0:
			var m legacy12.Request
			if proto.Unmarshal(b, &m) != nil {
				return
			}
			_, err = e.svc.Req(ctx, &m)
		case 1:
			var m legacy12.Hello
			if proto.Unmarshal(b, &m) != nil {
				return
			}
			_, err = e.svc.Hello(ctx, &m)
		case 2:
			var m legacy12.UpdateTargets
			if proto.Unmarshal(b, &m) != nil {
				return
			}
			_, err = e.svc.Update(ctx, &m)
		case 3:
			var m legacy12.Release
			if proto.Unmarshal(b, &m) != nil {
				return
			}
			_, err = e.svc.Release(ctx, &m)
		}
		if c := status.Code(err); c == codes.Unknown || c == codes.Internal {
			t.Fatalf("answered %v", err)
		}
		if !e.gw.Ready() {
			t.Fatal("the gateway stopped serving")
		}
	})
}

// FuzzWire sends arbitrary bytes as the request of each method over the
// gateway's real gRPC server (TLS on its control port), through the
// service's own codec and decoding: none may crash or wedge it, none is
// answered UNKNOWN or INTERNAL, and bytes that are not the method's
// message are INVALID_ARGUMENT.
func FuzzWire(f *testing.F) {
	e := start(f, 20*time.Millisecond)
	methods := []struct {
		name string
		msg  func() proto.Message
	}{
		{legacy12.Control_Req_FullMethodName, func() proto.Message { return &legacy12.Request{} }},
		{legacy12.Control_Hello_FullMethodName, func() proto.Message { return &legacy12.Hello{} }},
		{legacy12.Control_Update_FullMethodName, func() proto.Message { return &legacy12.UpdateTargets{} }},
		{legacy12.Control_Release_FullMethodName, func() proto.Message { return &legacy12.Release{} }},
	}
	seed := func(m byte, msg proto.Message) {
		b, _ := proto.Marshal(msg)
		f.Add(m, b)
	}
	seed(0, &legacy12.Request{Uid: uid(1), Role: "PROD", NumConn: 2})
	seed(1, &legacy12.Hello{Uid: uid(1), ProdListeners: []string{"127.0.0.1:7001"}, Role: "PROD"})
	seed(2, &legacy12.UpdateTargets{Uid: uid(1), RemoteListeners: []string{"127.0.0.1:5100"}, Role: "CONS"})
	seed(3, &legacy12.Release{Uid: uid(1)})
	f.Add(byte(0), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(byte(1), []byte{0x0a, 0x01, 0xff})
	f.Add(byte(2), []byte{0x12, 0x02, 0xc3, 0x28})
	f.Add(byte(3), []byte{0x0f})
	f.Fuzz(func(t *testing.T, method byte, b []byte) {
		m := methods[int(method)%len(methods)]
		ctx, cancel := context.WithTimeout(as(aliceToken), 10*time.Second)
		defer cancel()
		err := e.invokeRaw(ctx, m.name, b)
		c := status.Code(err)
		if c == codes.Unknown || c == codes.Internal {
			t.Fatalf("%s answered %v", m.name, err)
		}
		if proto.Unmarshal(b, m.msg()) != nil && c != codes.InvalidArgument {
			t.Fatalf("%s of undecodable bytes answered %v; want INVALID_ARGUMENT", m.name, err)
		}
		if !e.gw.Ready() {
			t.Fatal("the gateway stopped serving")
		}
	})
}
