"""Release bundles: build once, deploy the same bytes.

A bundle is a folder (or a published copy of one, at an HTTP(S) URL, in an S3 bucket) with
the executables of one release and `manifest.json`: the release id, the sha256 and size of
each executable, the version, the image and its digest, the build args and the source
revision. `rollout build` writes one; `rollout rollout --release DIR|URL` deploys one without
a Docker engine; `rollout publish` copies one where hosts can download it themselves.
"""
