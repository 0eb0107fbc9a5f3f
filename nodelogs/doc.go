// Package nodelogs keeps the container logs of kdefer's pods on their node
// after the kubelet removes them, so that a defer pod can archive them.
//
// The kubelet removes a deleted or evicted pod's containers, and their log
// files under its podLogsDir (NAMESPACE_NAME_UID/CONTAINER/N.log), as soon
// as they stop, even while a finalizer keeps the pod object. The node agent
// therefore hard-links each log file into a spool directory (Spool.Dir) the
// moment it sees the file created: a hard link keeps the file's data when
// the kubelet unlinks its path, and the runtime's later writes land in the
// same inode, so nothing is copied and nothing written is lost. The links
// outlive an agent restart; Forget removes them when the run is released.
//
// link(2) fails with EXDEV across mounts, so Dir must be on the same mount
// as the pod logs dir.
//
// Costs: every generation of a kept container's log stays on the node's
// log filesystem until Forget, beyond the kubelet's containerLogMaxSize and
// containerLogMaxFiles (the kubelet's deletion of an old rotated file frees
// nothing), and it counts against the node's nodefs, not the pod's
// ephemeral storage. The fsnotify watch on each container directory also
// wakes the agent on every write the runtime makes to a log file (inotify
// cannot be told to skip them through fsnotify); those events are dropped
// at once.
//
// Not kept: a file created and removed between two looks (the agent links
// at creation, through fsnotify, and rescans every Resync), and a rotated
// file the kubelet compressed before the agent saw it (.gz files are never
// linked: the agent is meant to have linked the file under its first name).
//
// Open serves one container attempt's spooled log decoded from the CRI log
// format back to what the container wrote, as kubectl logs shows it.
package nodelogs
