# Fills the Maven cache that the Dockerfile's build stage mounts (RUN --mount=type=cache,
# target=/root/.m2) from a Maven home on this machine, so that the next `docker compose up --build`
# takes the wrapper's Maven and every dependency from it instead of downloading them:
#   docker build -f docker/maven-cache.Dockerfile ~/.m2
# CI does this after `./mvnw verify` has filled ~/.m2. Without it the build downloads from Maven Central.
FROM eclipse-temurin:17-jdk
RUN --mount=type=cache,target=/root/.m2 --mount=type=bind,target=/seed cp -a /seed/repository /seed/wrapper /root/.m2/
