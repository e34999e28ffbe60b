package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// majorLiveness tells whether another major's operator is still there, from
// the leader-election Lease every installed operator renews (the bundle
// runs it with --leader-elect). A claim is a promise to remove the
// finalizer; a major whose Lease nobody has renewed for grace (uninstalled,
// scaled to zero, crash-looping) cannot keep it, so its claims are void.
//
// The Lease is looked up by name in every namespace, since another major
// may be installed anywhere: one LIST per major at most every
// livenessRecheck, whatever the number of its stacks.
type majorLiveness struct {
	reader    client.Reader
	leaseName func(major string) string
	grace     time.Duration

	mu     sync.Mutex
	majors map[string]*leaseSeen
}

// livenessRecheck bounds how often a major's Lease is read.
const livenessRecheck = 15 * time.Second

type leaseSeen struct {
	checked time.Time
	// renewed is when the major's Lease was last renewed (or acquired):
	// the Lease's own time the first time it is read, then this process's
	// clock at the first look after each change, so another machine's
	// clock skew counts only once. where names the Lease; stamp is its
	// last renew time as written.
	renewed     time.Time
	where       string
	stamp       string
	absentSince time.Time
	// aliveUntil: the major's operator re-claimed a stack whose claim this
	// process voided, proof that it runs although its Lease says nothing
	// (no leader election, another Lease name).
	aliveUntil time.Time
}

func newMajorLiveness(reader client.Reader, leaseName func(string) string, grace time.Duration) *majorLiveness {
	return &majorLiveness{reader: reader, leaseName: leaseName, grace: grace, majors: map[string]*leaseSeen{}}
}

// reclaimed records that major's operator claimed again a stack whose claim
// this process voided: it runs whatever its Lease says, so its claims are
// not voided again for a long while (a Lease it does not renew, because it
// runs without leader election or under another Lease name, would
// otherwise make the two operators take the stack from each other).
func (l *majorLiveness) reclaimed(major string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen(major).aliveUntil = time.Now().Add(reclaimedTrust)
}

// seen returns what is known of major; l.mu must be held.
func (l *majorLiveness) seen(major string) *leaseSeen {
	s := l.majors[major]
	if s == nil {
		s = &leaseSeen{}
		l.majors[major] = s
	}
	return s
}

// reclaimedTrust is how long a re-claim proves an operator alive.
const reclaimedTrust = time.Hour

// gone reports whether major's operator has been gone for longer than the
// grace period, and why (or, if not gone, what was seen).
func (l *majorLiveness) gone(ctx context.Context, major string) (bool, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen(major)
	now := time.Now()
	name := l.leaseName(major)
	if now.Sub(s.checked) >= livenessRecheck {
		var leases coordinationv1.LeaseList
		if err := l.reader.List(ctx, &leases, client.MatchingFields{"metadata.name": name}); err != nil {
			return false, "", fmt.Errorf("reading the %s operator's Lease %s: %w", major, name, err)
		}
		s.checked = now
		var latest time.Time
		where := ""
		for _, le := range leases.Items {
			for _, t := range []*metav1.MicroTime{le.Spec.AcquireTime, le.Spec.RenewTime} {
				if t != nil && t.After(latest) {
					latest, where = t.Time, le.Namespace+"/"+le.Name
				}
			}
		}
		stamp := where + "@" + latest.UTC().Format(time.RFC3339Nano)
		switch {
		case s.stamp == "":
			s.renewed = latest
		case stamp != s.stamp:
			s.renewed = now
		}
		s.stamp, s.where = stamp, where
		switch {
		case len(leases.Items) > 0:
			s.absentSince = time.Time{}
		case s.absentSince.IsZero():
			s.absentSince = now
		}
	}
	if now.Before(s.aliveUntil) {
		return false, fmt.Sprintf("it re-claimed a stack whose claim was voided, so it runs, although its Lease %s says otherwise", name), nil
	}
	if !s.absentSince.IsZero() {
		return now.Sub(s.absentSince) > l.grace,
			fmt.Sprintf("no Lease %s exists in any namespace (for %s)", name, now.Sub(s.absentSince).Round(time.Second)), nil
	}
	return now.Sub(s.renewed) > l.grace,
		fmt.Sprintf("its Lease %s was last renewed at %s", s.where, s.renewed.UTC().Format(time.RFC3339)), nil
}
