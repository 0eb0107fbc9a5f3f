package logsendpoint

import "testing"

// The kubelet's body for a log it no longer has is recognized, and only
// that: a container that printed something else, or more, is its log.
func TestKubeletLostLog(t *testing.T) {
	for body, want := range map[string]bool{
		"unable to retrieve container logs for containerd://0ac408ce7aeaa3a77459c0734d9a083a4d6ea1eaf42ec0619ec8e29bb2847c2a":   true,
		"unable to retrieve container logs for containerd://0ac408ce7aeaa3a77459c0734d9a083a4d6ea1eaf42ec0619ec8e29bb2847c2a\n": true,
		"unable to retrieve container logs for cri-o://abc\n":                                                                   true,
		"attempt 2\n": false,
		"":            false,
		"unable to retrieve container logs for containerd://abc\nattempt 2\n": false,
		"unable to retrieve container logs for nothing\n":                     false,
		"unable to retrieve container logs for containerd://\n":               false,
	} {
		if got := KubeletLostLog([]byte(body)); got != want {
			t.Errorf("KubeletLostLog(%q) = %v, want %v", body, got, want)
		}
	}
}
