package keyedoption

import (
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/proto/opledger/v1"
)

// marshalOption encodes MethodOptions carrying k as the generated
// package writes it.
func marshalOption(t testing.TB, k *opledgerv1.Keyed) []byte {
	t.Helper()
	opts := &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_IDEMPOTENT.Enum()}
	proto.SetExtension(opts, opledgerv1.E_Keyed, k)
	b, err := proto.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParse: Parse reads what the generated package writes, merges
// several occurrences as protobuf does, and reports the absence of the
// option.
func TestParse(t *testing.T) {
	t.Parallel()
	if FieldNumber != protowire.Number(opledgerv1.E_Keyed.TypeDescriptor().Number()) {
		t.Fatalf("FieldNumber %d, the extension's %d", FieldNumber, opledgerv1.E_Keyed.TypeDescriptor().Number())
	}
	for _, tc := range []struct {
		name string
		k    *opledgerv1.Keyed
		want Option
	}{
		{"empty", &opledgerv1.Keyed{}, Option{}},
		{"all", &opledgerv1.Keyed{KeyField: "request_id", Retention: durationpb.New(90*time.Minute + 5), RefuseUnknownBirth: true},
			Option{KeyField: "request_id", Retention: 90*time.Minute + 5, RefuseUnknownBirth: true}},
		{"zero retention", &opledgerv1.Keyed{Retention: &durationpb.Duration{}}, Option{}},
	} {
		got, ok, err := Parse(marshalOption(t, tc.k))
		if err != nil || !ok || got != tc.want {
			t.Errorf("%s: %+v %v %v, want %+v", tc.name, got, ok, err, tc.want)
		}
	}
	if o, ok, err := Parse(nil); ok || err != nil || o != (Option{}) {
		t.Errorf("no options: %+v %v %v", o, ok, err)
	}
	b, _ := proto.Marshal(&descriptorpb.MethodOptions{Deprecated: proto.Bool(true)})
	if _, ok, err := Parse(b); ok || err != nil {
		t.Errorf("options without the option: %v %v", ok, err)
	}
	// Two occurrences merge: the later key_field wins, retention merges
	// field by field.
	b = append(marshalOption(t, &opledgerv1.Keyed{KeyField: "a", Retention: &durationpb.Duration{Seconds: 7}}),
		marshalOption(t, &opledgerv1.Keyed{KeyField: "request_id", Retention: &durationpb.Duration{Nanos: 3}})...)
	if o, ok, err := Parse(b); err != nil || !ok || o != (Option{KeyField: "request_id", Retention: 7*time.Second + 3}) {
		t.Errorf("merged: %+v %v %v", o, ok, err)
	}
}

// TestParseInvalid: a malformed option is ErrInvalid, never a panic or a
// silent default.
func TestParseInvalid(t *testing.T) {
	t.Parallel()
	opt := func(fields ...[]byte) []byte {
		var body []byte
		for _, f := range fields {
			body = append(body, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, FieldNumber, protowire.BytesType), body)
	}
	dur := func(secs, nanos uint64) []byte {
		var d []byte
		d = protowire.AppendVarint(protowire.AppendTag(d, 1, protowire.VarintType), secs)
		d = protowire.AppendVarint(protowire.AppendTag(d, 2, protowire.VarintType), nanos)
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), d)
	}
	neg := func(v int64) uint64 { return uint64(v) }
	for name, b := range map[string][]byte{
		"truncated tag":         {0x98},
		"truncated value":       protowire.AppendTag(nil, FieldNumber, protowire.BytesType),
		"option a varint":       protowire.AppendVarint(protowire.AppendTag(nil, FieldNumber, protowire.VarintType), 1),
		"key_field a varint":    opt(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)),
		"key_field not UTF-8":   opt(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff})),
		"retention a varint":    opt(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)),
		"birth a string":        opt(protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), "yes")),
		"negative retention":    opt(dur(neg(-1), 0)),
		"negative nanos":        opt(dur(0, neg(-1))),
		"mixed signs":           opt(dur(1, neg(-1))),
		"nanos out of range":    opt(dur(0, 1e9)),
		"seconds out of range":  opt(dur(315_576_000_001, 0)),
		"beyond time.Duration":  opt(dur(math.MaxInt64/uint64(time.Second)+1, 0)),
		"retention nanos fixed": opt(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendFixed32(protowire.AppendTag(nil, 2, protowire.Fixed32Type), 1))),
	} {
		if o, ok, err := Parse(b); !errors.Is(err, ErrInvalid) || ok || o != (Option{}) {
			t.Errorf("%s: %+v %v %v, want ErrInvalid", name, o, ok, err)
		}
	}
}

// FuzzKeyedOption: for any bytes read as google.protobuf.MethodOptions,
// Parse never panics, and whatever it accepts the generated package
// decodes to the same option.
func FuzzKeyedOption(f *testing.F) {
	f.Add([]byte(nil))
	f.Add(marshalOption(f, &opledgerv1.Keyed{}))
	f.Add(marshalOption(f, &opledgerv1.Keyed{KeyField: "request_id", Retention: durationpb.New(time.Hour), RefuseUnknownBirth: true}))
	f.Add(append(marshalOption(f, &opledgerv1.Keyed{KeyField: "x"}), marshalOption(f, &opledgerv1.Keyed{Retention: &durationpb.Duration{Nanos: 1}})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, ok, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || ok || o != (Option{}) {
				t.Fatalf("error %v with %+v %v", err, o, ok)
			}
			return
		}
		var opts descriptorpb.MethodOptions
		if uerr := proto.Unmarshal(b, &opts); uerr != nil {
			return // malformed elsewhere in the options: not the option's business
		}
		if has := proto.HasExtension(&opts, opledgerv1.E_Keyed); has != ok {
			t.Fatalf("Parse says %v, the generated package %v", ok, has)
		}
		if !ok {
			return
		}
		k := proto.GetExtension(&opts, opledgerv1.E_Keyed).(*opledgerv1.Keyed)
		want := Option{KeyField: k.GetKeyField(), Retention: k.GetRetention().AsDuration(), RefuseUnknownBirth: k.GetRefuseUnknownBirth()}
		if o != want {
			t.Fatalf("Parse %+v, the generated package %+v", o, want)
		}
	})
}
