package timeline

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// ReadFaults parses an SVG that WriteSVG wrote (with encoding/xml) and
// returns the faults it draws, in document order: every group of class
// "fault", its kind, times and count from its data- attributes. Tests use
// it to check that a picture shows every fault of its run.
func ReadFaults(r io.Reader) ([]Fault, error) {
	dec := xml.NewDecoder(r)
	var out []Fault
	root := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("timeline: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if !root {
			if se.Name.Local != "svg" || se.Name.Space != "http://www.w3.org/2000/svg" {
				return nil, fmt.Errorf("timeline: the root element is %s, not an SVG", se.Name.Local)
			}
			root = true
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		if se.Name.Local != "g" || attr["class"] != "fault" {
			continue
		}
		f := Fault{Kind: attr["data-kind"]}
		if f.Kind == "" {
			return nil, errors.New("timeline: a fault without data-kind")
		}
		f.At, err = msAttr(attr["data-at-ms"])
		if err != nil {
			return nil, err
		}
		if v, ok := attr["data-until-ms"]; ok {
			if f.Until, err = msAttr(v); err != nil {
				return nil, err
			}
		}
		if v, ok := attr["data-n"]; ok {
			if f.N, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("timeline: data-n %q: %w", v, err)
			}
		}
		out = append(out, f)
	}
	if !root {
		return nil, errors.New("timeline: no SVG element")
	}
	return out, nil
}

func msAttr(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("timeline: a time of %q: %w", v, err)
	}
	return time.Duration(f * float64(time.Millisecond)), nil
}
