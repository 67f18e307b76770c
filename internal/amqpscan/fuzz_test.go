package amqpscan

import "testing"

// FuzzCheck is the scanner's proof: whatever payload Check passes, go-amqp
// decodes without panic and without error.
func FuzzCheck(f *testing.F) {
	// Seeds over 8 KiB slow every mutation down; the tables run those.
	for _, c := range normalMessages() {
		if len(c.payload) <= 8<<10 {
			f.Add(c.payload)
		}
	}
	for _, c := range hostileMessages() {
		if len(c.payload) <= 8<<10 {
			f.Add(c.payload)
		}
	}
	f.Add(smallNormal)
	// The big cases, in a size the fuzzer can work with.
	f.Add(nestedMaps(40))
	f.Add(sec(0x75, bin32(make([]byte, 1000))))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if Check(payload, Limits{}) != nil {
			return
		}
		if p, err := decode(payload); p != nil || err != nil {
			t.Fatalf("Check passed % x, go-amqp: panic %v, error %v", payload, p, err)
		}
	})
}
