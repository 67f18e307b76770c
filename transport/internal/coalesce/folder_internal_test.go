package coalesce

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dedup is a Folder of a protocol where a frame "x" written again says
// nothing more: it folds into the pending "x", and a pending "x" that is all
// there is is held back for the next one to fold into.
type dedup struct{}

func (dedup) Fold(buf, p []byte) ([]byte, bool) {
	return buf, string(p) == "x" && bytes.HasSuffix(buf, []byte("x"))
}

func (dedup) Take(buf, spare []byte, release bool) (out, next []byte, holding bool) {
	if !release && string(buf) == "x" {
		return spare[:0], buf, true
	}
	return buf, spare[:0], false
}

// TestFolderFoldsAndHolds: the coalescer counts the frames its Folder folds,
// writes what the Folder holds back once holdFor has passed, and on Close.
func TestFolderFoldsAndHolds(t *testing.T) {
	rc := newRecordingConn()
	c := New(rc, dedup{}, 20*time.Millisecond)
	defer c.Close()
	for range 3 {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { got, _ := rc.snapshot(); return string(got) == "x" },
		5*time.Second, time.Millisecond, "the held frame goes out when its hold runs out")
	require.Equal(t, uint64(2), c.Folded())
	require.Equal(t, uint64(1), c.ExpiredHolds())

	long := New(newRecordingConn(), dedup{}, time.Hour)
	_, err := long.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, long.Close())
	got, _ := long.Conn.(*recordingConn).snapshot()
	require.Equal(t, "x", string(got), "Close writes what is held")
	require.Zero(t, long.ExpiredHolds(), "a hold Close ends has not run out")
}

// Without a Folder nothing is folded or held, whatever holdFor says.
func TestNoFolderHoldsNothing(t *testing.T) {
	rc := newRecordingConn()
	c := New(rc, nil, time.Hour)
	defer c.Close()
	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { got, _ := rc.snapshot(); return string(got) == "x" }, 5*time.Second, time.Millisecond)
	require.Zero(t, c.Folded())
}
