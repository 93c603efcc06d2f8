package bulk

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Codec is a gRPC codec whose messages are raw bytes: a *[]byte is sent as its
// contents, and a received message is copied into the *[]byte given to RecvMsg,
// reusing its capacity.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// CodecName is the content subtype of Codec ("application/grpc+bytes").
const CodecName = "bytes"

// Name returns CodecName.
func (Codec) Name() string { return CodecName }

// Marshal copies *v into a pooled buffer, so the caller may reuse *v at once.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("bulk: cannot marshal %T, want *[]byte", v)
	}
	return mem.BufferSlice{mem.Copy(*b, mem.DefaultBufferPool())}, nil
}

// Unmarshal copies data into *v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("bulk: cannot unmarshal into %T, want *[]byte", v)
	}
	n := data.Len()
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	data.CopyTo(*b)
	return nil
}
