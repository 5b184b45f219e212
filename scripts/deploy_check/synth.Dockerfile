# The test trainer of scripts/deploy_check.sh: gnmr-synth, built in the
# gnmrd image's build stage (BUILD_IMAGE: `podman build --target build`,
# cached), on top of the gnmrd image, whose libraries it shares.
ARG BUILD_IMAGE
ARG GNMRD_IMAGE
FROM ${BUILD_IMAGE} AS build
ARG BUILD_JOBS=
RUN CMAKE_BUILD_PARALLEL_LEVEL=${BUILD_JOBS} cmake --build build --target gnmr-synth \
 && install -D -m 0755 -s build/examples/gnmr_synth/gnmr-synth /out/gnmr-synth

FROM ${GNMRD_IMAGE}
COPY --from=build /out/gnmr-synth /usr/local/bin/gnmr-synth
HEALTHCHECK NONE
ENTRYPOINT ["/usr/local/bin/gnmr-synth"]
CMD ["--help"]
