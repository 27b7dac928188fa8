package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/opledger/opledger/internal/keyedoption"
)

// probeMaxBody bounds a response probe reads.
const probeMaxBody = 4 << 20

// httpProbe is the HTTP and the connect transport: a POST of JSON.
type httpProbe struct {
	url     string
	headers headerFlags
	connect bool // the Connect protocol: a raw key, markers in Trailer- headers, errors as JSON
	client  *http.Client
}

func newHTTPProbe(u string, h headerFlags, connect bool) *httpProbe {
	return &httpProbe{url: u, headers: h, connect: connect, client: &http.Client{}}
}

func (p *httpProbe) kind() string {
	if p.connect {
		return "connect"
	}
	return "HTTP"
}

func (p *httpProbe) target() string { return maskCredentials(p.url) }
func (p *httpProbe) close()         { p.client.CloseIdleConnections() }

func (p *httpProbe) encode(req string) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(req)); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	return b.Bytes(), nil
}

func (p *httpProbe) call(ctx context.Context, key string, body []byte, resolve bool, extra headerFlags) probeAnswer {
	if resolve {
		body = nil
		if p.connect {
			body = []byte("{}") // an empty message of the request type
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return probeAnswer{err: err}
	}
	for _, kv := range slices.Concat(p.headers, extra) {
		req.Header.Add(kv[0], kv[1])
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		if p.connect {
			req.Header.Set("Idempotency-Key", key)
		} else {
			req.Header.Set("Idempotency-Key", `"`+key+`"`) // a structured-field string
		}
	}
	if resolve {
		req.Header.Set("Idempotency-Resolve", "1")
	}
	res, err := p.client.Do(req)
	if err != nil {
		return probeAnswer{err: errors.New(strings.ReplaceAll(err.Error(), p.url, p.target()))}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, probeMaxBody))
	if err != nil {
		return probeAnswer{err: err}
	}
	h := res.Header
	get := func(name string) string {
		if v := h.Get(name); v != "" {
			return v
		}
		return h.Get("Trailer-" + name)
	}
	a := probeAnswer{ok: res.StatusCode/100 == 2, status: strconv.Itoa(res.StatusCode), body: b,
		replayed: strings.EqualFold(get("Idempotency-Replayed"), "true") || strings.EqualFold(h.Get("Idempotent-Replayed"), "true"),
		lifetime: get("Idempotency-Key-Lifetime") != "", second: get(probeSecondHeader)}
	if p.connect {
		if v := get("Grpc-Retry-Pushback-Ms"); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			a.hasPush, a.pushback = err == nil && ms >= 0, time.Duration(ms)*time.Millisecond
		}
		if !a.ok {
			a.status, a.reason = connectError(b, a.status)
		}
		return a
	}
	if v := h.Get("Retry-After"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		a.hasPush, a.pushback = err == nil && s >= 0, time.Duration(s)*time.Second
	}
	if !a.ok && strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		var prob struct{ Type string }
		if json.Unmarshal(b, &prob) == nil {
			if _, name, ok := strings.Cut(prob.Type, "#"); ok {
				a.reason = name
			}
		}
	}
	return a
}

// connectError reads a Connect protocol error: its code and the reason
// of its google.rpc.ErrorInfo detail.
func connectError(b []byte, httpStatus string) (code, reason string) {
	var e struct {
		Code    string
		Details []struct{ Type, Value string }
	}
	if json.Unmarshal(b, &e) != nil || e.Code == "" {
		return httpStatus, ""
	}
	for _, d := range e.Details {
		if d.Type != "google.rpc.ErrorInfo" {
			continue
		}
		v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err == nil {
			reason = errorInfoReason(v)
		}
	}
	return e.Code, reason
}

// errorInfoReason reads the reason (field 1) of a google.rpc.ErrorInfo's
// bytes, without its generated type.
func errorInfoReason(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

// grpcProbe is the gRPC transport: the request's type from reflection
// or a descriptor set, the calls sent and answered as raw bytes.
type grpcProbe struct {
	addr, method string
	conn         *grpc.ClientConn
	md           metadata.MD
	in           protoreflect.MessageDescriptor
	types        *dynamicpb.Types
}

func newGRPCProbe(ctx context.Context, addr, method, descriptors string, h headerFlags, timeout time.Duration) (*grpcProbe, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, fmt.Errorf("--grpc: %w", err)
	}
	p := &grpcProbe{addr: addr, method: "/" + method, conn: conn, md: metadata.MD{}}
	for _, kv := range h {
		p.md.Append(strings.ToLower(kv[0]), kv[1])
	}
	var files *protoregistry.Files
	var served []string // the services reflection lists; nil: every service of the files
	if descriptors != "" {
		files, err = readDescriptorSet(descriptors)
	} else {
		rctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, p.md), timeout)
		files, served, err = reflectFiles(rctx, conn, method)
		cancel()
		if err != nil {
			err = fmt.Errorf("reading the server's reflection (or give --descriptors): %w", err)
		}
	}
	if err != nil {
		return p, err
	}
	if method == "" {
		if method, err = keyedMethodOf(files, served); err != nil {
			return p, err
		}
		p.method = "/" + method
	}
	svc, m, _ := strings.Cut(method, "/")
	d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return p, fmt.Errorf("--method: service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return p, fmt.Errorf("--method: %s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(m))
	if md == nil {
		return p, fmt.Errorf("--method: service %s has no method %s", svc, m)
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return p, fmt.Errorf("--method: %s is a streaming method; keyed methods are unary", method)
	}
	p.in, p.types = md.Input(), dynamicpb.NewTypes(files)
	return p, nil
}

func (p *grpcProbe) kind() string   { return "gRPC" }
func (p *grpcProbe) target() string { return maskCredentials(p.addr) }
func (p *grpcProbe) close()         { p.conn.Close() }

func (p *grpcProbe) encode(req string) ([]byte, error) {
	m := dynamicpb.NewMessage(p.in)
	if err := (protojson.UnmarshalOptions{Resolver: p.types}).Unmarshal([]byte(req), m); err != nil {
		return nil, fmt.Errorf("not a %s in JSON: %w", p.in.FullName(), err)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

func (p *grpcProbe) call(ctx context.Context, key string, body []byte, resolve bool, extra headerFlags) probeAnswer {
	md := p.md.Copy()
	for _, kv := range extra {
		md.Append(strings.ToLower(kv[0]), kv[1])
	}
	if key != "" {
		md.Set("idempotency-key", key)
	}
	if resolve {
		md.Set("idempotency-resolve", "1")
		body = []byte{} // an empty message of the request type
	}
	var header, trailer metadata.MD
	out := new([]byte)
	err := p.conn.Invoke(metadata.NewOutgoingContext(ctx, md), p.method, &body, out, grpc.Header(&header), grpc.Trailer(&trailer))
	get := func(name string) string {
		if v := trailer.Get(name); len(v) > 0 {
			return v[0]
		}
		if v := header.Get(name); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	a := probeAnswer{ok: err == nil, status: "OK", body: *out,
		replayed: get("idempotency-replayed") == "true", lifetime: get("idempotency-key-lifetime") != "",
		second: get(strings.ToLower(probeSecondHeader))}
	if v := get("grpc-retry-pushback-ms"); v != "" {
		ms, perr := strconv.ParseInt(v, 10, 64)
		a.hasPush, a.pushback = perr == nil && ms >= 0, time.Duration(ms)*time.Millisecond
	}
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			return probeAnswer{err: err}
		}
		a.body = nil
		a.status = strings.ToLower(codeName(st.Code().String()))
		for _, d := range st.Proto().GetDetails() {
			if strings.HasSuffix(d.GetTypeUrl(), "/google.rpc.ErrorInfo") {
				a.reason = errorInfoReason(d.GetValue())
			}
		}
	}
	return a
}

// codeName turns a gRPC code's Go name (FailedPrecondition) into the
// protocol's (failed_precondition).
func codeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// rawCodec sends and receives messages as their bytes, so that probe
// compares answers byte for byte as they came over the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// readDescriptorSet reads a FileDescriptorSet file.
func readDescriptorSet(path string) (*protoregistry.Files, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--descriptors: %w", err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("--descriptors %s: not a FileDescriptorSet: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("--descriptors %s: %w (build it with its imports: protoc --include_imports)", path, err)
	}
	return files, nil
}

// reflectFiles reads, with the server's reflection (v1), the file that
// defines service and every file it imports.
// reflectFiles reads, with the server's reflection, the files that
// define the service of method (pkg.Svc/Method) and their imports; with
// method "", those of every service the server lists, and the list.
func reflectFiles(ctx context.Context, conn *grpc.ClientConn, method string) (*protoregistry.Files, []string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx, grpc.ForceCodec(protoCodec{}))
	if err != nil {
		return nil, nil, err
	}
	defer stream.CloseSend()
	var services []string
	if method == "" {
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			return nil, nil, err
		}
		res, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		if e := res.GetErrorResponse(); e != nil {
			return nil, nil, errors.New(e.GetErrorMessage())
		}
		for _, s := range res.GetListServicesResponse().GetService() {
			services = append(services, s.GetName())
		}
	} else {
		services = []string{method[:strings.IndexByte(method, '/')]}
	}
	have := map[string]bool{}
	var set descriptorpb.FileDescriptorSet
	for _, svc := range services {
		req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}}
		if err := askFiles(stream, req, have, &set); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", svc, err)
		}
	}
	files, err := protodesc.NewFiles(&set)
	return files, services, err
}

// keyedMethodOf is the one method (pkg.Svc/Method) of files that carries
// the (opledger.v1.keyed) option, among the services named by served
// (nil: every service of files). No such method, or several, is an
// error that says to give --method (and names the several).
func keyedMethodOf(files *protoregistry.Files, served []string) (string, error) {
	var keyed []string
	var misused []error
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			if served != nil && !slices.Contains(served, string(sd.FullName())) {
				continue
			}
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				opts, _ := md.Options().(*descriptorpb.MethodOptions)
				_, ok, err := keyedoption.Of(md, opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS)
				switch {
				case err != nil:
					misused = append(misused, err)
				case ok:
					keyed = append(keyed, string(sd.FullName())+"/"+string(md.Name()))
				}
			}
		}
		return true
	})
	slices.Sort(keyed)
	from := "the server's reflection"
	if served == nil {
		from = "--descriptors"
	}
	switch {
	case len(keyed) == 1:
		return keyed[0], nil
	case len(keyed) > 1:
		return "", fmt.Errorf("--method is required: %d methods of %s carry the (opledger.v1.keyed) option: %s", len(keyed), from, strings.Join(keyed, ", "))
	case len(misused) > 0:
		return "", fmt.Errorf("--method is required: no method of %s carries a valid (opledger.v1.keyed) option: %w", from, errors.Join(misused...))
	default:
		return "", fmt.Errorf("--method is required: no method of %s carries the (opledger.v1.keyed) option", from)
	}
}

// askFiles sends req, adds the files of its answer to set and,
// recursively, the files they import.
func askFiles(stream reflectionpb.ServerReflection_ServerReflectionInfoClient, req *reflectionpb.ServerReflectionRequest, have map[string]bool, set *descriptorpb.FileDescriptorSet) error {
	if err := stream.Send(req); err != nil {
		return err
	}
	res, err := stream.Recv()
	if err != nil {
		return err
	}
	if e := res.GetErrorResponse(); e != nil {
		return errors.New(e.GetErrorMessage())
	}
	var todo []string
	for _, b := range res.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			return err
		}
		if have[fd.GetName()] {
			continue
		}
		have[fd.GetName()] = true
		set.File = append(set.File, fd)
		todo = append(todo, fd.GetDependency()...)
	}
	for _, dep := range todo {
		if !have[dep] {
			next := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}}
			if err := askFiles(stream, next, have, set); err != nil {
				return fmt.Errorf("%s: %w", dep, err)
			}
		}
	}
	return nil
}

// protoCodec is the proto codec for the reflection stream, on a
// connection whose default codec is rawCodec.
type protoCodec struct{}

func (protoCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("protoCodec: %T", v)
	}
	return proto.Marshal(m)
}

func (protoCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("protoCodec: %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (protoCodec) Name() string { return "proto" }
