package policy

import (
	"bytes"
	"io"
	"reflect"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

var reflectAny = reflect.TypeOf((*any)(nil)).Elem()
