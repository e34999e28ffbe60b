//go:build containers_image_openpgp

package tools

import (
	_ "github.com/google/go-containerregistry/pkg/authn"
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/go-containerregistry/pkg/v1/layout"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/operator-framework/api/pkg/validation"
	_ "github.com/operator-framework/operator-registry/alpha/action"
	_ "github.com/operator-framework/operator-registry/alpha/template/semver"
	_ "github.com/operator-framework/operator-registry/pkg/lib/bundle"
	_ "github.com/operator-framework/operator-registry/pkg/lib/config"
)
