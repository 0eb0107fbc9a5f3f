// Package controller holds kdefer's reconcilers: the pod reconciler arms
// managed pods (pod_controller.go, arm.go), the DeferRun reconciler drives a
// run from its pod's end to the release of the work volume (deferrun_*.go),
// and the Job reconciler keeps the Job's summary and removes the runs of
// deleted Jobs (job_controller.go). It also owns what those need: the defer
// pod builder (deferpod.go), the trigger classification (classify.go), the
// reading of a defer pod's outcome (outcome.go), the cache scoping
// (cache.go) and SetupWithManager (setup.go).
//
// It must not import the webhooks (package controller/webhook) nor build a
// manager: cmd/kdefer-controller/app wires controllers and webhooks side by
// side. Names the CLI shares (condition reasons, DeferPodName, Finished)
// live in api/v1alpha1, not here.
//
// # The life of a run
//
// Pod side (PodReconciler), then run side (RunReconciler.step). A pass
// writes the run's status at most once (writeStatus), and its events after
// it; the pass's passEnd says whether it writes at all. status.state is the
// most advanced True condition (v1alpha1.StateOf).
//
//	managed pod --finalizer kdefer.io/defer--> work PVC created
//	    |  DeferRun created at PVC creation (webhook.PVCArmer -> RunForNewClaim)
//	    |  or by the pod reconciler (arm), then made the PVC's second owner
//	    v
//	(armed, no status)     nothing is written while the pod runs
//	    |  pod ends: Classify -> trigger, held in memory until the next write;
//	    |  a node NotReady for nodeLostTimeout counts as an end (NodeLost)
//	    v
//	execute:  skip asked, released by hand, force-deleted ---------> Skipped
//	    |     policy missing: ConfigError=True, wait;
//	    |       fixed -> ConfigError=False; deadline passed -------> Failed
//	    |     no step for the trigger -----------------------------> Skipped
//	    |     node NotReady: StagingOut=False (NodeNotReady), wait;
//	    |       lost: relocate (volume not node-local) or ---------> Failed
//	    v
//	defer pod created      endCreated: no write this pass; PDB ensured;
//	    |                  no work PVC left ---------------------> Skipped
//	    v  bookkeeping pass (bookkeepingDelay; skipped if the pod is done first)
//	StagingOut=True        Armed, Triggered and the trigger stored
//	    |  a step's Secret missing (its kubelet says): ConfigError=True, wait;
//	    |    the step starts -> ConfigError=False; deadline ------> Failed
//	    |  defer pod done (Observe)
//	    v
//	Succeeded | Failed (PermanentError, RetriesExhausted, DeadlineExceeded,
//	    |              DeferPodFailed)
//	    |  Succeeded with unsaved files: Incomplete=True (UnsavedFiles)
//	    v  finish (every final state): stop the defer pod, handle the volume
//	VolumeReleased=True    Succeeded, Skipped, onFailure Release
//	VolumeReleased=False   Retained (Failed or Incomplete, by default) until retainFor
//	    |                  passes or `kdefer release` (v1alpha1.AnnotationRelease)
//	    v
//	pod finalizer removed (pod side); after the TTL the run is deleted
//	(endDelete); a run deleted before it finished ends Skipped (RunDeleted),
//	releases its volume, then loses its finalizer kdefer.io/release.
package controller
