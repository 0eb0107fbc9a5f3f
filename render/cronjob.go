package render

import (
	batchv1 "k8s.io/api/batch/v1"
)

// CronJobJob returns the Job a CronJob's jobTemplate stands for, named and
// namespaced as the CronJob: the CronJob controller copies the template's
// labels, annotations and spec into every Job it creates, so what kdefer
// would refuse in one of those Jobs is wrong in the template already.
// `kdefer render/lint` and the CronJob webhook check this Job.
func CronJobJob(cj *batchv1.CronJob) *batchv1.Job {
	t := cj.Spec.JobTemplate
	j := &batchv1.Job{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	j.Name, j.Namespace = cj.Name, cj.Namespace
	return j
}
