package dedupe

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/storecfg"
)

// Codec encodes the values DoJSON and RunJSON record and decodes them for
// a repeat. Its method set is encoding/json's (and that of drop-in JSON
// libraries such as json-iterator's ConfigCompatibleWithStandardLibrary);
// an adapter of a few lines fits gob, CBOR, MessagePack or protobuf.
// Unmarshal gets a pointer to a zero value of the call's type. A Codec
// must be safe for concurrent use, and must decode what it encoded in
// earlier versions of the program for as long as keys live.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// WithCodec sets the Codec with which DoJSON and RunJSON record values
// (encoding/json otherwise). The recorded bytes are the codec's alone:
// changing a Store's codec makes the keys it recorded before unreadable
// to it (a repeat then gets the decode error), until they expire. A nil
// codec is sqlonce.ErrInvalidArgument. DoResponse and Run record the
// bytes they are given, whatever the codec.
func WithCodec(c Codec) Option {
	return func(o *storecfg.Options) error {
		if c == nil {
			return fmt.Errorf("%w: nil codec", sqlonce.ErrInvalidArgument)
		}
		o.Codec = c
		return nil
	}
}

// jsonCodec is the default Codec: encoding/json, without HTML escaping,
// so that a json.RawMessage holding <, > or & comes back as it went in
// (the decoded strings are the same either way).
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
