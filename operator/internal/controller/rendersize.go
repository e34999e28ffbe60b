package controller

import (
	"encoding/json"
	"fmt"
)

// A stack's spec is a tenant's input whose size the operator's work grows
// with, and the chart copies spec.applicationTemplate into every
// application: a spec within the API server's limits could render tens of
// MiB (a large value in the template, times every application), which the
// operator would render, parse, diff and create on every attempt, and
// whose status write the API server would refuse. So a render is bounded:
// before it, by the size of the values it is made of; after it, by its own
// size. Either refusal is a failed release whose condition and Event name
// the limit, before anything is created.

// maxRenderBytes bounds a stack's rendered manifest: about 15 KB for a
// typical stack, and far above what any stack of the chart's documented
// shape renders (a few KB per application).
const maxRenderBytes = 1 << 20

// maxValuesBytes bounds the values a render is made of, each application
// merged over the template, as JSON: most of what they hold is rendered,
// some more than once, so values past four times the render limit cannot
// render within it, and rendering them would cost the CPU the limit
// saves.
const maxValuesBytes = 4 * maxRenderBytes

// RenderTooLargeError says a stack renders, or would render, more than the
// operator accepts.
type RenderTooLargeError struct {
	What         string
	Size, Limit  int
	Applications int
}

// renderTooLarge is in every RenderTooLargeError's text.
const renderTooLarge = "above the operator's limit of"

func (e *RenderTooLargeError) Error() string {
	msg := fmt.Sprintf("the stack %s %d bytes, %s %d (%d MiB); nothing was created or changed", e.What, e.Size, renderTooLarge, e.Limit, e.Limit>>20)
	if e.Applications > 0 {
		msg += fmt.Sprintf(": spec.applicationTemplate is copied into each of its %d applications; make the spec smaller, or split the applications over several stacks", e.Applications)
	}
	return msg
}

// checkValuesSize refuses values that cannot render within
// maxRenderBytes, before they are rendered.
func checkValuesSize(vals map[string]any) error {
	size, err := jsonSize(vals)
	if err != nil {
		return err
	}
	apps, _ := vals["applications"].(map[string]any)
	if tmpl, ok := vals["applicationTemplate"]; ok && len(apps) > 0 {
		t, err := jsonSize(tmpl)
		if err != nil {
			return err
		}
		size += t * len(apps)
	}
	if size > maxValuesBytes {
		return &RenderTooLargeError{What: "has values (each application merged over the template) of", Size: size, Limit: maxValuesBytes, Applications: len(apps)}
	}
	return nil
}

// checkRenderSize refuses a rendered manifest larger than maxRenderBytes.
func checkRenderSize(size int) error {
	if size <= maxRenderBytes {
		return nil
	}
	return &RenderTooLargeError{What: "renders a manifest of", Size: size, Limit: maxRenderBytes}
}

func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("measuring the stack's values: %w", err)
	}
	return len(b), nil
}
