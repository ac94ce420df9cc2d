# hotplugd's image for those who build with Docker or buildah:
#
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$(git describe --tags --always --dirty) -t REPO:TAG .
#   buildah build --build-arg VERSION=... -t REPO:TAG .
#
# Its file system is the one `make image` builds without Docker: only the
# static binary at /hotplugd (docs/image.md says why nothing else). `make
# image` is the reproducible build (fixed timestamps, one layer, the same
# digest for the same commit); this one has the builder's timestamps.
# hack/image's TestDockerfileMatchesMakefile checks that the final stage, the
# go build flags and the Makefile's IMAGE_PATH, IMAGE_ENTRYPOINT and LDFLAGS
# agree.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o /out/hotplugd ./cmd/hotplugd

FROM scratch
COPY --from=build --chmod=0755 /out/hotplugd /hotplugd
ENTRYPOINT ["/hotplugd"]
