package controller

import "github.com/kdefer/kdefer/render"

// EffectivePolicy applies a pod's kdefer.io annotations (copied there from
// the Job by render) over the named DeferPolicy's spec and fills in every
// default: render's function, so the webhook, `kdefer render` and the
// controller compute the same policy.
var EffectivePolicy = render.EffectivePolicy
