package bench

import (
	"io"
	"testing"
)

// The workload's own cost, to compare with the rates it measures.

func BenchmarkProduce64KiB(b *testing.B) {
	s := Spec{Size: 64 << 10, Bytes: 64 << 20, Seed: 1, Run: 1}
	g, _ := NewGenerator(s)
	b.SetBytes(s.Bytes)
	for b.Loop() {
		if _, err := Produce(io.Discard, g); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify64KiB(b *testing.B) {
	s := Spec{Size: 64 << 10, Bytes: 64 << 20, Seed: 1, Run: 1}
	g, _ := NewGenerator(s)
	var data []byte
	for seq := range uint64(s.Messages()) {
		data = append(data, g.Message(seq)...)
	}
	b.SetBytes(s.Bytes)
	for b.Loop() {
		v, _ := NewVerifier(s)
		for p := data; len(p) > 0; {
			n := min(len(p), 64<<10)
			if err := v.Feed(p[:n], 0); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
		if err := v.Finish(); err != nil {
			b.Fatal(err)
		}
	}
}
