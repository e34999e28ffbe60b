package controller

import (
	"fmt"
	"regexp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Ownership. Every major's operator puts the same Helm finalizer on the
// stacks it installs, so the finalizer alone cannot say who may remove it.
// The operator that reconciles a stack therefore also records itself:
//
//   - on the stack, ReconciledByLabel = its major, written together with the
//     finalizer (the claim);
//   - on every Helm release Secret it writes, the same label (a Helm release
//     label), so it can tell who left a revision pending and reacts only to
//     the deletion of its own revisions.
//
// An operator releases a stack it claimed once the stack's major label no
// longer names it: it removes its claim and the finalizer in one write,
// guarded by the resourceVersion, so a stack claimed meanwhile by its new
// major (or deleted and re-created under the same name) is never touched.
const (
	// ReconciledByLabel names the major whose operator has claimed a stack.
	ReconciledByLabel = "models.takeoff.co/reconciled-by"

	// uninstallFinalizer is the finalizer helm-operator-plugins puts on
	// every stack it has installed; all majors share it.
	uninstallFinalizer = "uninstall-helm-release"
)

// majorLabelValue is what an operatorVersion label must look like to name an
// operator major.
var majorLabelValue = regexp.MustCompile(`^v(0|[1-9][0-9]*)$`)

// majorSelector is the isolation rule of one operator: the stacks whose
// label Key is Major.
type majorSelector struct {
	Key, Major string
}

// newMajorSelector accepts exactly one matchLabels entry: the operator's
// isolation is a single label, and the hand-off needs its negation, which a
// general selector does not have.
func newMajorSelector(s *metav1.LabelSelector) (majorSelector, error) {
	if s == nil || len(s.MatchLabels) != 1 || len(s.MatchExpressions) != 0 {
		return majorSelector{}, fmt.Errorf("the selector must be exactly one matchLabels entry (such as operatorVersion: v0), got %v", s)
	}
	for k, v := range s.MatchLabels {
		if !majorLabelValue.MatchString(v) {
			return majorSelector{}, fmt.Errorf("selector %s=%s: the value must be v<MAJOR>", k, v)
		}
		return majorSelector{Key: k, Major: v}, nil
	}
	panic("unreachable")
}

// own selects the stacks this operator reconciles.
func (m majorSelector) own() labels.Selector {
	return labels.SelectorFromSet(labels.Set{m.Key: m.Major})
}

// released selects the stacks this operator claimed that are no longer
// labelled for it (relabelled, unlabelled): the ones it must let go of.
func (m majorSelector) released() labels.Selector {
	return labels.NewSelector().Add(
		mustRequirement(ReconciledByLabel, selection.Equals, m.Major),
		mustRequirement(m.Key, selection.NotEquals, m.Major),
	)
}

// unclaimed selects the stacks no operator has claimed that are not labelled
// for this one: stacks without a valid label, or whose major's operator is
// absent. Normally empty.
func (m majorSelector) unclaimed() labels.Selector {
	return labels.NewSelector().Add(
		mustRequirement(ReconciledByLabel, selection.DoesNotExist),
		mustRequirement(m.Key, selection.NotEquals, m.Major),
	)
}

// claimedElsewhere selects the stacks another major's operator has claimed:
// the ones whose claims this operator voids if that operator is gone.
func (m majorSelector) claimedElsewhere() labels.Selector {
	return labels.NewSelector().Add(
		mustRequirement(ReconciledByLabel, selection.Exists),
		mustRequirement(ReconciledByLabel, selection.NotEquals, m.Major),
	)
}

func mustRequirement(key string, op selection.Operator, vals ...string) labels.Requirement {
	r, err := labels.NewRequirement(key, op, vals)
	if err != nil {
		panic(err)
	}
	return *r
}

// claimedBy reports whether obj carries major's claim.
func claimedBy(obj metav1.Object, major string) bool {
	return obj.GetLabels()[ReconciledByLabel] == major
}

// The Managed condition says whether an operator reconciles the stack and,
// when none does, why.
const (
	conditionManaged  = "Managed"
	conditionDeployed = "Deployed"
	// conditionRecovered records the last recovery of a release that an
	// operator left pending.
	conditionRecovered = "Recovered"
	// conditionOperatorUpgrade says whether an upgrade the operator's own
	// chart causes waits for the stack's turn (see waves.go).
	conditionOperatorUpgrade = "OperatorUpgrade"

	reasonReconciling            = "Reconciling"
	reasonNoOperatorVersionLabel = "NoOperatorVersionLabel"
	reasonInvalidOperatorVersion = "InvalidOperatorVersionLabel"
	reasonNoOperatorClaimed      = "NoOperatorClaimed"
	reasonNotManaged             = "NotManaged"
	reasonPendingReleaseFailed   = "PendingReleaseMarkedFailed"
	reasonUpgradeQueued          = "WaitingForWave"
	reasonUpgradeTurn            = "TurnInWave"
	reasonUpgradeWithSpec        = "AppliedWithSpecChange"
	reasonUpgradeNotNeeded       = "NoWaveNeeded"
)

// condition is one entry of status.conditions in the shape
// helm-operator-plugins writes, so the library keeps entries it does not
// own when it updates the status.
type condition struct {
	Type, Status, Reason, Message string
}

// unmanaged explains why no operator reconciles a stack labelled value
// (present tells whether the label exists at all).
func unmanaged(key, value string, present bool, releasedBy string) condition {
	c := condition{Type: conditionManaged, Status: "False"}
	switch {
	case !present:
		c.Reason = reasonNoOperatorVersionLabel
		c.Message = fmt.Sprintf("no operator reconciles this stack: it has no %s label; set %s: v<MAJOR> to the major of an installed operator", key, key)
	case !majorLabelValue.MatchString(value):
		c.Reason = reasonInvalidOperatorVersion
		c.Message = fmt.Sprintf("no operator reconciles this stack: %s=%q is not of the form v<MAJOR> (such as v0)", key, value)
	default:
		c.Reason = reasonNoOperatorClaimed
		c.Message = fmt.Sprintf("labelled %s=%s, but no operator of that major has claimed it", key, value)
	}
	if releasedBy != "" {
		c.Message += fmt.Sprintf("; the %s operator released it and kept its workloads", releasedBy)
	}
	return c
}

// setConditions merges cs into obj's status.conditions and reports whether
// anything changed. A condition's lastTransitionTime moves only when its
// status does.
func setConditions(obj *unstructured.Unstructured, now time.Time, cs ...condition) bool {
	existing, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	changed := false
	for _, c := range cs {
		found := false
		for i, e := range existing {
			m, ok := e.(map[string]any)
			if !ok || m["type"] != c.Type {
				continue
			}
			found = true
			if m["status"] == c.Status && m["reason"] == c.Reason && m["message"] == c.Message {
				break
			}
			n := map[string]any{"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
				"lastTransitionTime": m["lastTransitionTime"]}
			if m["status"] != c.Status || m["lastTransitionTime"] == nil {
				n["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
			}
			existing[i] = n
			changed = true
			break
		}
		if !found {
			existing = append(existing, map[string]any{"type": c.Type, "status": c.Status, "reason": c.Reason,
				"message": c.Message, "lastTransitionTime": now.UTC().Format(time.RFC3339)})
			changed = true
		}
	}
	if changed {
		if err := unstructured.SetNestedSlice(obj.Object, existing, "status", "conditions"); err != nil {
			// Only a status that is not an object gets here; the CRD's schema
			// rules it out.
			panic(fmt.Sprintf("setting status.conditions: %v", err))
		}
	}
	return changed
}

// conditionOf returns obj's condition of type typ.
func conditionOf(obj *unstructured.Unstructured, typ string) (condition, bool) {
	existing, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, e := range existing {
		m, ok := e.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		return condition{Type: typ, Status: str("status"), Reason: str("reason"), Message: str("message")}, true
	}
	return condition{}, false
}

// conditionSince returns when obj's condition typ last changed status.
func conditionSince(obj *unstructured.Unstructured, typ string) (time.Time, bool) {
	existing, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, e := range existing {
		m, ok := e.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		s, _ := m["lastTransitionTime"].(string)
		t, err := time.Parse(time.RFC3339, s)
		return t, err == nil
	}
	return time.Time{}, false
}

// notDeployed replaces a Deployed=True that no operator stands behind any
// more.
func notDeployed(obj *unstructured.Unstructured) []condition {
	var out []condition
	if c, ok := conditionOf(obj, conditionDeployed); ok && c.Status == "True" {
		out = append(out, condition{Type: conditionDeployed, Status: "Unknown", Reason: reasonNotManaged,
			Message: "no operator reconciles this stack (see the Managed condition); its workloads were left as they were"})
	}
	// Nobody keeps the readiness of an unmanaged stack: what it said last
	// is no longer known.
	if c, ok := conditionOf(obj, conditionReady); ok && c.Status != "Unknown" {
		out = append(out, condition{Type: conditionReady, Status: "Unknown", Reason: reasonNotManaged,
			Message: "no operator reconciles this stack (see the Managed condition), so nobody watches whether it serves"})
	}
	return out
}
