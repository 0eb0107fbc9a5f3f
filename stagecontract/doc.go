// Package stagecontract is the contract between the kdefer controller and
// kdefer-stage, the binary its stage steps run: what one side writes and the
// other reads, in one place so neither side can change it alone.
//
// It owns:
//   - the environment the controller (and render, for stage-in) passes to
//     every stage and defer step (EnvNamespace ... EnvExitCode) and the
//     manifest identity read from it (IdentityEnv);
//   - the stage URLs both sides understand: schemes and the template
//     placeholders (URLSchemes, URLPlaceholders, PlaceholderEnv), which
//     the controller validates and kdefer-stage expands;
//   - kdefer-stage's exit codes (ExitOK ... ExitPermanent), which the
//     controller maps to "retry" or "fail the run now";
//   - the layout of a stage-out prefix (ReservedDir, ManifestKey) and the
//     manifest schema (Manifest, ManifestFile, ManifestVersion);
//   - the StageSummary the step writes to its termination message;
//   - the logs endpoint the stage-out step fetches the ended pod's logs
//     from (EnvLogsURL ..., LogsAudience, LogsPath, LogsIndex) and where it
//     stores them (LogsDir, LogKey, Manifest.Logs).
//
// It must not import Kubernetes packages or any other kdefer package, and
// holds no behaviour beyond encoding: validating a manifest against key
// rules is storage's job, reading exit codes and summaries the controller's.
// Changing anything here changes what running pods and stored manifests
// mean, so changes must stay compatible with what is already deployed.
package stagecontract
