package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzProbeAnswerParsing: whatever a probed server answers, the probe's
// readers of a Connect error and of an ErrorInfo's reason never panic, and
// an ErrorInfo that carries a reason reads back; a --header flag never
// keeps a name with a space, and the flag's String never shows a value.
func FuzzProbeAnswerParsing(f *testing.F) {
	info := protowire.AppendTag(nil, 1, protowire.BytesType)
	info = protowire.AppendString(info, "IDEMPOTENCY_KEY_EXPIRED")
	f.Add([]byte(`{"code":"failed_precondition","details":[{"type":"google.rpc.ErrorInfo","value":"ChdJREVNUE9URU5DWV9LRVlfRVhQSVJFRA"}]}`), info, "Authorization: Bearer secret-token")
	f.Add([]byte(`{"code":""}`), []byte{0xff, 0xff}, "no colon")
	f.Add([]byte(`not json`), []byte{}, " : value")
	f.Fuzz(func(t *testing.T, body, infoBytes []byte, header string) {
		_, _ = connectError(body, "500")
		_ = errorInfoReason(infoBytes)

		want := strings.ToValidUTF8(string(infoBytes), "")
		if want != "" && len(want) < 1000 {
			b := protowire.AppendTag(nil, 1, protowire.BytesType)
			b = protowire.AppendString(b, want)
			if got := errorInfoReason(b); got != want {
				t.Fatalf("errorInfoReason = %q, want %q", got, want)
			}
		}

		var h headerFlags
		if err := h.Set(header); err != nil {
			t.Fatalf("Set returned %v: it never fails", err)
		}
		name, value := h[0][0], h[0][1]
		if strings.ContainsAny(name, " \t\r\n") {
			t.Fatalf("header name %q keeps a space", name)
		}
		if value != "" && !strings.Contains(name, value) && strings.Contains(h.String(), value) {
			t.Fatalf("String %q shows the value %q", h.String(), value)
		}
		if h.check() != nil && name != "" {
			t.Fatalf("check refused the header named %q", name)
		}
	})
}
