"""The strings of the Flux and gating APIs, verbatim, in one place; the closed sets among them
typed (``Literal``), so a misspelt value fails mypy, not a review."""

from typing import Final, Literal, get_args

GATING_GROUP = "gating.toolkit.fluxcd.io"
GATING_VERSION = "v1alpha1"
GATING_API_VERSION = f"{GATING_GROUP}/{GATING_VERSION}"
GATE_KIND = "Gate"
GATEKEEPER_KIND = "GateKeeper"
GATE_PLURAL = "gates"
GATEKEEPER_PLURAL = "gatekeepers"

# Toggles on a Gate, and who asked and why.
OPEN_ANNOTATION = "open.gate.fluxcd.io/requestedAt"
CLOSE_ANNOTATION = "close.gate.fluxcd.io/requestedAt"
MESSAGE_ANNOTATION = f"{GATING_GROUP}/message"
REQUESTED_BY_ANNOTATION = f"{GATING_GROUP}/requestedBy"
# Who toggled a Gate as the API server authenticated them: stamped and sealed by our webhook on
# every write that changes a toggle; compact JSON (admission.core.gates.togglestamp,
# docs/decisions/0096). Without the webhook a toggle still lands and shows unverified.
TOGGLED_BY_ANNOTATION = f"{GATING_GROUP}/toggledBy"
TOGGLED_BY_FIELD = "toggledBy"  # the Gate's status: who the controller verified toggled it
# Approvals of exact content on a Gate: one annotation each, ``<prefix><id>`` (the id is the
# approver's, so two approvers never write the same key), its value compact JSON
# (admission.core.gates.approvals). The webhook stamps who wrote it (docs/decisions/0057).
APPROVAL_ANNOTATION_PREFIX = f"approval.{GATING_GROUP}/"
APPROVAL_ANY_TARGET = "*"  # an approval "for" every object behind the gate
# A Gate's status list of approvals that ended (used or expired): written by the controller, which
# may write a Gate's status but not the Gate (it must not be able to open one).
ENDED_APPROVALS_FIELD = "endedApprovals"
ENDED_APPROVALS_MAX_ITEMS = 256  # the CRD's maxItems for it (admission.core.gates.approvalrecord stays below)
WITHDRAWN_AT_FIELD = "withdrawnAt"  # on an ended approval whose annotation was withdrawn since

# On Flux objects.
GATES_ANNOTATION = f"{GATING_GROUP}/gates"
REQUIRE_ANNOTATION = f"{GATING_GROUP}/require"
AUDIT_ANNOTATION = f"{GATING_GROUP}/audit"
# A label that sends an object's status writes to the fail-closed validating entry on clusters
# without matchConditions (manifests/components/pre-1.30); with them, every referencing object's are.
FAIL_CLOSED_LABEL = f"{GATING_GROUP}/fail-closed"
SUSPEND_DURING_ANNOTATION = "reconcile.fluxcd.io/suspendDuring"
SUSPENDED_DURING_ANNOTATION = "reconcile.fluxcd.io/suspendedDuring"  # RFC-0006 spelling
SUSPENDED_ANNOTATION = "reconcile.fluxcd.io/suspended"
RECONCILE_REQUEST_ANNOTATION = "reconcile.fluxcd.io/requestedAt"
KUSTOMIZE_NAME_LABEL = "kustomize.toolkit.fluxcd.io/name"
KUSTOMIZE_NAMESPACE_LABEL = "kustomize.toolkit.fluxcd.io/namespace"
# helm-controller labels the HelmChart it generates with its HelmRelease (fluxcd/pkg/ssa
# ResourceManager.SetOwnerLabels, owner group helm.toolkit.fluxcd.io), and every object a release
# deploys as well (its post-renderer's origin labels).
HELM_NAME_LABEL = "helm.toolkit.fluxcd.io/name"
HELM_NAMESPACE_LABEL = "helm.toolkit.fluxcd.io/namespace"

# A Gate's status: its state, its condition, the condition's reasons, and the controller's Events.
STATE_OPENED = "Opened"
STATE_CLOSED = "Closed"
OPENED_CONDITION = "Opened"
REASON_DEFAULT = "Default"
REASON_SCHEDULED = "Scheduled"
REASON_OPEN_REQUESTED = "OpenRequested"
REASON_CLOSE_REQUESTED = "CloseRequested"
REASON_INVALID = "Invalid"
REASON_NOT_FOUND = "NotFound"
REASON_UNKNOWN = "Unknown"  # the gate cache cannot be trusted
GATE_OPENED_EVENT = "GateOpened"
GATE_CLOSED_EVENT = "GateClosed"  # also a denied change, on the held object
REASON_APPROVED = "ContentApproved"  # a closed gate counted open for one write of approved content
APPROVAL_RECORDED_EVENT = "ApprovalRecorded"
APPROVAL_USED_EVENT = "ApprovalUsed"  # its content landed: the controller ends it (ENDED_APPROVALS_FIELD)
APPROVAL_EXPIRED_EVENT = "ApprovalExpired"
APPROVAL_WITHDRAWN_EVENT = "ApprovalWithdrawn"  # its annotation was removed (live, or ended before)

# How a Flux object's gates combine (its require annotation).
Require = Literal["all", "oneOf"]
REQUIRE_ALL: Final = "all"
REQUIRE_ONE_OF: Final = "oneOf"

# What a held change meets: denied (enforce), or let through with a warning and a record
# (audit); a Gate's spec.mode, and the server's --mode.
Mode = Literal["enforce", "audit"]
ENFORCE: Final = "enforce"
AUDIT: Final = "audit"
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
# The warning an audit-mode hold lets through with (kubectl prints it; `check` reads it back).
AUDIT_WARNING: Final = "gate audit: change would be denied in enforce mode: "

# What a held request would have changed (logs, metrics): the object itself (spec, gates,
# creation, deletion), or the content its status records (an artifact, an image, an attempt).
HeldWhat = Literal["edit", "content"]
EDIT: Final = "edit"
CONTENT: Final = "content"

# Our webhook entries (manifests/webhooks; what each is asked: admission.core.admission.matching).
VALIDATE_WEBHOOK = f"validate.{GATING_GROUP}"
VALIDATE_STATUS_WEBHOOK = f"validate-status.{GATING_GROUP}"
VALIDATE_INHERITED_WEBHOOK = f"validate-status-inherited.{GATING_GROUP}"
VALIDATE_FAIL_CLOSED_WEBHOOK = f"validate-status-fail-closed.{GATING_GROUP}"  # pre-1.30 only
MUTATE_WEBHOOK = f"mutate.{GATING_GROUP}"
MUTATE_STATUS_WEBHOOK = f"mutate-status.{GATING_GROUP}"
VALIDATE_APPROVALS_WEBHOOK = f"validate-approvals.{GATING_GROUP}"  # Gates whose approvals change
MUTATE_APPROVALS_WEBHOOK = f"mutate-approvals.{GATING_GROUP}"  # stamps the approver
MUTATE_TOGGLES_WEBHOOK = f"mutate-toggles.{GATING_GROUP}"  # stamps who toggled; fails open

# Where Flux is installed by default, and where the flux CLI works without -n.
FLUX_SYSTEM_NAMESPACE = "flux-system"
# Where a namespaced object without a namespace is, and where a kubeconfig context without one works.
DEFAULT_NAMESPACE = "default"

KUSTOMIZE_GROUP = "kustomize.toolkit.fluxcd.io"
HELM_GROUP = "helm.toolkit.fluxcd.io"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
IMAGE_GROUP = "image.toolkit.fluxcd.io"

# Conditions on Flux objects (the gating RFC's Blocked and Approved, Flux's own Ready).
READY_CONDITION = "Ready"
BLOCKED_CONDITION = "Blocked"  # True on a held source or ImagePolicy: new content waits, the old is served
APPROVED_CONDITION = "Approved"  # False on a held Kustomization or HelmRelease while new content waits
GATE_CLOSED_REASON = GATE_CLOSED_EVENT  # the same word on a held object's condition and its Event

# Flux status fields that carry content (FLUX-WRITES.md).
ARTIFACT_FIELD = "artifact"  # sources: status.artifact {revision, digest, url, path, size, lastUpdateTime}
LATEST_REF_FIELD = "latestRef"  # ImagePolicy v1 (and v1beta2 of late): {name, tag, digest}
LATEST_IMAGE_FIELD = "latestImage"  # ImagePolicy, older versions: "repo:tag"
LAST_APPLIED_REVISION_FIELD = "lastAppliedRevision"  # Kustomization
LAST_ATTEMPTED_REVISION_FIELD = "lastAttemptedRevision"  # Kustomization and HelmRelease
LAST_ATTEMPTED_REVISION_DIGEST_FIELD = "lastAttemptedRevisionDigest"  # HelmRelease
LAST_ATTEMPTED_CONFIG_DIGEST_FIELD = "lastAttemptedConfigDigest"  # HelmRelease
HISTORY_FIELD = "history"  # HelmRelease: history[0] is what was applied last

# Kubernetes' own deleters: a namespace being deleted must never hang on a gate. The garbage
# collector deletes what owner references say, and those are gated on held objects
# (admission.core.admission.changes); its own edits of them (removing owners that are gone) pass.
SYSTEM_DELETERS = frozenset(
    {
        "system:serviceaccount:kube-system:namespace-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:kube-controller-manager",
    }
)


# Kubernetes' own strings: what `kubectl apply` records, and the groups the API server adds.
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
AUTHENTICATED_GROUP = "system:authenticated"
ANONYMOUS_USER = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"


# GateKeeper calendars: the condition on a GateKeeper, its reasons and Events, and the
# properties a gate-admission hub's /calendar.ics carries for the spokes that follow it.
CALENDARS_READY_CONDITION = "CalendarsReady"
REASON_FETCHED = "Fetched"
REASON_FETCH_FAILED = "FetchFailed"
REASON_FETCHING = "Fetching"  # CalendarsReady=Unknown: another of its calendars was never fetched yet
CONDITION_UNKNOWN = REASON_UNKNOWN  # a condition status: cannot say yet
CALENDAR_FAILED_EVENT = "CalendarFetchFailed"
CALENDAR_RECOVERED_EVENT = "CalendarFetched"
FEED_COMPLETE_UNTIL_PROPERTY = "X-FLUX-GATE-COMPLETE-UNTIL"  # the feed lists every closed interval up to here
FEED_GATE_PROPERTY = "X-FLUX-GATE"  # on each event: the gate, namespace/name
FEED_REASON_PROPERTY = (
    "X-FLUX-GATE-REASON"  # on each event: why the gate is closed (Scheduled, CloseRequested, ...)
)


# AdmissionReview, as the API server sends it and wants it back (admission.core.admission.review).
AdmissionApiVersion = Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
ADMISSION_API_VERSIONS: Final[tuple[AdmissionApiVersion, ...]] = get_args(AdmissionApiVersion)
AdmissionReviewKind = Literal["AdmissionReview"]
ADMISSION_REVIEW_KIND: Final = "AdmissionReview"
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: Final[tuple[Operation, ...]] = get_args(Operation)
PatchType = Literal["JSONPatch"]
JSON_PATCH: Final = "JSONPatch"
