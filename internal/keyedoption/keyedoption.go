// Package keyedoption reads the method option (opledger.v1.keyed) of
// proto/opledger/v1 from a method's descriptor, for the descriptor
// catalogs (policy's and connectint's). It reads the option's wire form
// (field 51155 of google.protobuf.MethodOptions) with protowire, so that
// it reads the same whether the Go package opledgerv1 is linked (the
// extension is then a known field) or not (a descriptor set read from a
// file then holds it as unknown fields), and so that the library need not
// link that package.
package keyedoption

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opledger/opledger/internal/requestid"
)

// FieldNumber is the extension's field number in
// google.protobuf.MethodOptions.
const FieldNumber protowire.Number = 51155

// The field numbers of opledger.v1.Keyed and google.protobuf.Duration.
const (
	keyFieldNumber           protowire.Number = 1
	retentionNumber          protowire.Number = 2
	refuseUnknownBirthNumber protowire.Number = 3
	durationSecondsNumber    protowire.Number = 1
	durationNanosNumber      protowire.Number = 2
)

// maxDurationSeconds is google.protobuf.Duration's range: ±10,000 years.
const maxDurationSeconds = 315_576_000_000

// Option is the value of a method's (opledger.v1.keyed) option.
type Option struct {
	// KeyField is the request field that carries the key beside the
	// header: "" or requestid.Name once checked by Of.
	KeyField string
	// Retention is the method's own retention; zero means the ledger's.
	Retention time.Duration
	// RefuseUnknownBirth says the method refuses keys without a birth.
	RefuseUnknownBirth bool
}

// ErrInvalid is what every error of Parse and Of wraps: the option is
// malformed, or misused on its method.
var ErrInvalid = errors.New("invalid (opledger.v1.keyed) option")

// Of returns the (opledger.v1.keyed) option of md and whether md has one.
// readOnly says the method is a read (its kind, as the catalog resolved
// it, is no side effects). An error names the method and says what is
// wrong: the option is malformed; it is on a streaming or read-only
// method; its key_field is not request_id, or the request message has no
// AIP-155 request_id for it; or it names no key_field while the request
// has an AIP-155 request_id (which the kit's servers read as the key:
// the .proto would hide it from clients).
func Of(md protoreflect.MethodDescriptor, readOnly bool) (Option, bool, error) {
	if md == nil {
		return Option{}, false, nil
	}
	opts := md.Options()
	if opts == nil {
		return Option{}, false, nil
	}
	b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(opts)
	if err != nil {
		return Option{}, false, fmt.Errorf("%w: method %s: its options cannot be encoded: %w", ErrInvalid, fullMethod(md), err)
	}
	o, ok, err := Parse(b)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("method %s: %w", fullMethod(md), err)
		}
		return Option{}, false, err
	}
	if err := check(md, readOnly, o); err != nil {
		return Option{}, false, fmt.Errorf("%w: method %s: %w", ErrInvalid, fullMethod(md), err)
	}
	return o, true, nil
}

// fullMethod names md as gRPC does, "/pkg.Service/Method".
func fullMethod(md protoreflect.MethodDescriptor) string {
	if sd, ok := md.Parent().(protoreflect.ServiceDescriptor); ok {
		return "/" + string(sd.FullName()) + "/" + string(md.Name())
	}
	return string(md.FullName())
}

// check says what is wrong with option o on method md, or nil.
func check(md protoreflect.MethodDescriptor, readOnly bool, o Option) error {
	switch {
	case md.IsStreamingClient() || md.IsStreamingServer():
		return errors.New("a streaming method cannot be keyed: the kit protects unary calls only")
	case readOnly:
		return errors.New("a read-only method (idempotency_level = NO_SIDE_EFFECTS) cannot be keyed: remove the option or the idempotency level")
	}
	in := md.Input()
	rid := requestid.Field(in)
	switch o.KeyField {
	case "":
		if rid != nil {
			return fmt.Errorf("its request %s has AIP-155's request_id, which the server reads as the key: say so with key_field: \"request_id\"", in.FullName())
		}
	case string(requestid.Name):
		if rid == nil {
			return fmt.Errorf("key_field \"request_id\": its request %s has no top-level singular string field request_id outside a oneof (AIP-155)", in.FullName())
		}
	default:
		return fmt.Errorf("key_field %.64q: the kit reads a key from the request's request_id field only (AIP-155); name it request_id, or leave key_field empty and send the key in the idempotency-key header", o.KeyField)
	}
	return nil
}

// Parse reads the (opledger.v1.keyed) option from b, the wire encoding of
// a google.protobuf.MethodOptions message, and reports whether b holds
// one. Several occurrences of the field merge, as protobuf merges an
// embedded message; unknown fields of the option are skipped. An error
// (wrapping ErrInvalid) reports a malformed encoding, a field of the
// option with the wrong wire type, a key_field that is not UTF-8, or a
// retention that is negative, out of google.protobuf.Duration's range or
// beyond time.Duration's.
func Parse(b []byte) (Option, bool, error) {
	var keyed []byte
	found := false
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != FieldNumber {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d has wire type %d, not a message", num, typ)
		}
		found = true
		keyed = append(keyed, v...)
		return nil
	})
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return Option{}, false, err
	}
	o, err := parseKeyed(keyed)
	if err != nil {
		return Option{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return o, true, nil
}

// parseKeyed reads an opledger.v1.Keyed message.
func parseKeyed(b []byte) (Option, error) {
	var o Option
	var retention []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case keyFieldNumber:
			if typ != protowire.BytesType || !utf8.Valid(v) {
				return errors.New("key_field is not a UTF-8 string")
			}
			o.KeyField = string(v)
		case retentionNumber:
			if typ != protowire.BytesType {
				return errors.New("retention is not a google.protobuf.Duration")
			}
			retention = append(retention, v...)
		case refuseUnknownBirthNumber:
			n, m := protowire.ConsumeVarint(v)
			if typ != protowire.VarintType || m < 0 {
				return errors.New("refuse_unknown_birth is not a bool")
			}
			o.RefuseUnknownBirth = n != 0
		}
		return nil
	})
	if err != nil {
		return Option{}, err
	}
	if retention != nil {
		if o.Retention, err = parseDuration(retention); err != nil {
			return Option{}, fmt.Errorf("retention: %w", err)
		}
	}
	return o, nil
}

// parseDuration reads a google.protobuf.Duration that must be zero or
// positive and fit a time.Duration.
func parseDuration(b []byte) (time.Duration, error) {
	var secs, nanos int64
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != durationSecondsNumber && num != durationNanosNumber {
			return nil
		}
		n, m := protowire.ConsumeVarint(v)
		if typ != protowire.VarintType || m < 0 {
			return fmt.Errorf("field %d is not a varint", num)
		}
		if num == durationSecondsNumber {
			secs = int64(n)
		} else {
			nanos = int64(int32(n)) // int32 on the wire: the low 32 bits
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, err
	case secs < -maxDurationSeconds || secs > maxDurationSeconds || nanos <= -1e9 || nanos >= 1e9 ||
		secs > 0 && nanos < 0 || secs < 0 && nanos > 0:
		return 0, fmt.Errorf("not a valid google.protobuf.Duration (seconds %d, nanos %d)", secs, nanos)
	case secs < 0 || nanos < 0:
		return 0, fmt.Errorf("negative (seconds %d, nanos %d)", secs, nanos)
	case secs > (math.MaxInt64-nanos)/int64(time.Second):
		return 0, fmt.Errorf("%d seconds is beyond what the kit can hold (about 292 years)", secs)
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), nil
}

// fields calls f with each field of the message encoded in b: its
// number, wire type and value (a varint's or a fixed value's bytes as
// they are; a length-delimited field's contents; a group's bytes).
func fields(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed encoding: %w", protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("malformed encoding of field %d: %w", num, protowire.ParseError(m))
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}
