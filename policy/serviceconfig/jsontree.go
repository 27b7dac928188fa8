package serviceconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonKind is the type of a JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// String returns the kind's JSON name, as findings spell it: "number".
func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// jsonValue is a decoded JSON value that, unlike map[string]any, keeps the
// order of object keys and every duplicate key, so that the validator can
// report them.
type jsonValue struct {
	kind   jsonKind
	b      bool
	num    json.Number
	str    string
	elems  []*jsonValue
	fields []jsonField
}

type jsonField struct {
	key string
	val *jsonValue
}

// maxJSONDepth bounds nesting so that hostile input cannot exhaust the stack.
const maxJSONDepth = 64

var errTooDeep = errors.New("nesting deeper than 64 levels")

// parseJSONTree decodes exactly one JSON value from data.
func parseJSONTree(data []byte) (*jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func readJSONValue(dec *json.Decoder, depth int) (*jsonValue, error) {
	if depth > maxJSONDepth {
		return nil, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("unexpected end of JSON input")
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jsonValue{kind: jsonNull}, nil
	case bool:
		return &jsonValue{kind: jsonBool, b: t}, nil
	case json.Number:
		return &jsonValue{kind: jsonNumber, num: t}, nil
	case string:
		return &jsonValue{kind: jsonString, str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &jsonValue{kind: jsonArray}
			for dec.More() {
				e, err := readJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		case '{':
			v := &jsonValue{kind: jsonObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				e, err := readJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.fields = append(v.fields, jsonField{key: key, val: e})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}
