package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A SentencePiece tokenizer.model is a protobuf ModelProto. The fields read here
// (from sentencepiece_model.proto):
//
//	message ModelProto {
//	  repeated SentencePiece pieces = 1;  // string piece = 1; float score = 2; Type type = 3;
//	  TrainerSpec trainer_spec = 2;       // model_type = 3 (UNIGRAM 1, BPE 2, WORD 3, CHAR 4);
//	                                      // treat_whitespace_as_suffix = 24; byte_fallback = 35;
//	                                      // unk_id = 40; bos_id = 41; eos_id = 42
//	  NormalizerSpec normalizer_spec = 3; // name = 1; precompiled_charsmap = 2;
//	                                      // add_dummy_prefix = 3; remove_extra_whitespaces = 4;
//	                                      // escape_whitespaces = 5
//	}
//
// Piece types: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.

// wire is a protobuf wire-format reader over one message.
type wire struct {
	b   []byte
	off int
}

var errTruncated = errors.New("truncated")

func (w *wire) done() bool { return w.off >= len(w.b) }

func (w *wire) varint() (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if w.off >= len(w.b) {
			return 0, errTruncated
		}
		c := w.b[w.off]
		w.off++
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("varint longer than 10 bytes")
}

// field reads a key and the field's value: for wire type 0 the varint in v, for 1
// and 5 the fixed bytes in v, for 2 the bytes in data.
func (w *wire) field() (num int, typ int, v uint64, data []byte, err error) {
	key, err := w.varint()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	num, typ = int(key>>3), int(key&7)
	if num == 0 {
		return 0, 0, 0, nil, errors.New("field number 0")
	}
	switch typ {
	case 0:
		v, err = w.varint()
	case 1:
		if len(w.b)-w.off < 8 {
			return 0, 0, 0, nil, errTruncated
		}
		v = binary.LittleEndian.Uint64(w.b[w.off:])
		w.off += 8
	case 2:
		var n uint64
		if n, err = w.varint(); err != nil {
			break
		}
		if n > uint64(len(w.b)-w.off) {
			return 0, 0, 0, nil, fmt.Errorf("field %d: length %d runs past the end", num, n)
		}
		data = w.b[w.off : w.off+int(n)]
		w.off += int(n)
	case 5:
		if len(w.b)-w.off < 4 {
			return 0, 0, 0, nil, errTruncated
		}
		v = uint64(binary.LittleEndian.Uint32(w.b[w.off:]))
		w.off += 4
	default:
		return 0, 0, 0, nil, fmt.Errorf("field %d has wire type %d, which is not supported", num, typ)
	}
	return num, typ, v, data, err
}

type spPiece struct {
	piece string
	score float32
	typ   int32
}

type spModel struct {
	pieces                 []spPiece
	modelType              int64
	byteFallback           bool
	whitespaceAsSuffix     bool
	unkID, bosID, eosID    int64
	normName               string
	charsmap               int
	addDummyPrefix         bool
	removeExtraWhitespaces bool
	escapeWhitespaces      bool
}

// expect checks a field's wire type.
func expect(what string, typ, want int) error {
	if typ != want {
		return fmt.Errorf("%s has wire type %d, want %d", what, typ, want)
	}
	return nil
}

func parseSentencePiece(data []byte) (*spModel, error) {
	m := &spModel{
		modelType: 1, unkID: 0, bosID: 1, eosID: 2,
		addDummyPrefix: true, removeExtraWhitespaces: true, escapeWhitespaces: true,
	}
	w := wire{b: data}
	for !w.done() {
		num, typ, _, sub, err := w.field()
		if err != nil {
			return nil, err
		}
		switch num {
		case 1:
			if err := expect("piece", typ, 2); err != nil {
				return nil, err
			}
			p, err := parsePiece(sub)
			if err != nil {
				return nil, fmt.Errorf("piece %d: %w", len(m.pieces), err)
			}
			m.pieces = append(m.pieces, p)
		case 2:
			if err := expect("trainer_spec", typ, 2); err != nil {
				return nil, err
			}
			if err := m.parseTrainer(sub); err != nil {
				return nil, fmt.Errorf("trainer_spec: %w", err)
			}
		case 3:
			if err := expect("normalizer_spec", typ, 2); err != nil {
				return nil, err
			}
			if err := m.parseNormalizer(sub); err != nil {
				return nil, fmt.Errorf("normalizer_spec: %w", err)
			}
		}
	}
	return m, nil
}

func parsePiece(data []byte) (spPiece, error) {
	p := spPiece{typ: typeNormal}
	w := wire{b: data}
	for !w.done() {
		num, typ, v, sub, err := w.field()
		if err != nil {
			return p, err
		}
		switch num {
		case 1:
			if err := expect("piece", typ, 2); err != nil {
				return p, err
			}
			p.piece = string(sub)
		case 2:
			if err := expect("score", typ, 5); err != nil {
				return p, err
			}
			p.score = math.Float32frombits(uint32(v))
		case 3:
			if err := expect("type", typ, 0); err != nil {
				return p, err
			}
			if v < typeNormal || v > typeByte {
				return p, fmt.Errorf("type %d is not a piece type", v)
			}
			p.typ = int32(v)
		}
	}
	return p, nil
}

func (m *spModel) parseTrainer(data []byte) error {
	w := wire{b: data}
	for !w.done() {
		num, typ, v, _, err := w.field()
		if err != nil {
			return err
		}
		var dst *int64
		switch num {
		case 3:
			dst = &m.modelType
		case 24, 35:
			if err := expect(fmt.Sprintf("field %d", num), typ, 0); err != nil {
				return err
			}
			if num == 24 {
				m.whitespaceAsSuffix = v != 0
			} else {
				m.byteFallback = v != 0
			}
		case 40:
			dst = &m.unkID
		case 41:
			dst = &m.bosID
		case 42:
			dst = &m.eosID
		}
		if dst != nil {
			if err := expect(fmt.Sprintf("field %d", num), typ, 0); err != nil {
				return err
			}
			*dst = int64(int32(v)) // int32 fields: negative values are sign-extended
		}
	}
	return nil
}

func (m *spModel) parseNormalizer(data []byte) error {
	w := wire{b: data}
	for !w.done() {
		num, typ, v, sub, err := w.field()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			if err := expect("name", typ, 2); err != nil {
				return err
			}
			m.normName = string(sub)
		case 2:
			if err := expect("precompiled_charsmap", typ, 2); err != nil {
				return err
			}
			m.charsmap = len(sub)
		case 3, 4, 5:
			if err := expect(fmt.Sprintf("field %d", num), typ, 0); err != nil {
				return err
			}
			switch num {
			case 3:
				m.addDummyPrefix = v != 0
			case 4:
				m.removeExtraWhitespaces = v != 0
			case 5:
				m.escapeWhitespaces = v != 0
			}
		}
	}
	return nil
}

// FromSentencePiece builds a Tokenizer from a SentencePiece model file
// (tokenizer.model), as the sentencepiece library encodes with it: BPE merges by
// piece score, byte fallback when the model has it, the dummy prefix and ▁ for
// spaces. The model type must be BPE and the normalizer "identity" (as in Llama 2);
// others give an error. Control pieces (<s>, </s>) and the unknown piece are special
// tokens, recognised in text only with ParseSpecial (the sentencepiece library never
// recognises them; llama.cpp does with parse_special); user-defined pieces are
// always recognised. DefaultOptions adds BOS, as Llama does.
func FromSentencePiece(model []byte) (*Tokenizer, error) {
	t, err := fromSentencePiece(model)
	if err != nil {
		return nil, fmt.Errorf("sentencepiece model: %w", err)
	}
	return t, nil
}

func fromSentencePiece(data []byte) (*Tokenizer, error) {
	m, err := parseSentencePiece(data)
	if err != nil {
		return nil, err
	}
	if len(m.pieces) == 0 {
		return nil, errors.New("no pieces")
	}
	switch m.modelType {
	case 2:
	case 1:
		return nil, errors.New("model type UNIGRAM is not supported (only BPE)")
	default:
		return nil, fmt.Errorf("model type %d is not supported (only BPE, 2)", m.modelType)
	}
	if m.whitespaceAsSuffix {
		return nil, errors.New("treat_whitespace_as_suffix is not supported")
	}
	if m.normName != "" && m.normName != "identity" || m.normName == "" && m.charsmap > 0 {
		return nil, fmt.Errorf("normalizer %q is not supported (only identity)", m.normName)
	}
	n := len(m.pieces)
	if n >= maxVocab {
		return nil, fmt.Errorf("%d pieces, more than %d", n, maxVocab)
	}
	t := newBuilder(n)
	pieces := make([]string, n)
	types := make([]int32, n)
	scores := make([]float32, n)
	for i, p := range m.pieces {
		if p.piece == "" {
			return nil, fmt.Errorf("piece %d is empty", i)
		}
		if _, dup := t.ids[p.piece]; dup {
			return nil, fmt.Errorf("piece %d %q is already defined", i, p.piece)
		}
		t.setToken(int32(i), p.piece)
		pieces[i], types[i], scores[i] = p.piece, p.typ, p.score
	}
	t.setupSPM(pieces, types, scores, m.byteFallback, m.addDummyPrefix, m.removeExtraWhitespaces, m.escapeWhitespaces)
	t.buildMatchers()
	pick := func(id int64) int32 {
		if id >= 0 && id < int64(n) {
			return int32(id)
		}
		return -1
	}
	if id := pick(m.unkID); id >= 0 && types[id] == typeUnknown {
		t.unk = id
	}
	t.bos = pick(m.bosID)
	eos := pick(m.eosID)
	if t.bos >= 0 {
		t.bosSeq = []int32{t.bos}
		t.addBOS = true
	}
	if eos >= 0 {
		t.eosSeq = []int32{eos}
	}
	t.finishEOS(eos, nil)
	return t.Tokenizer, nil
}
