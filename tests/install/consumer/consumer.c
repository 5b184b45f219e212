/* A trainer rank using the installed C API (a C translation unit). */
#include <gnmr/gnmr_c.h>
#include <gnmr/version.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = "unix:/nonexistent/gnmrd.sock";
  o.job_id = "consumer-c";
  o.decision_wait_ms = 0;
  gnmr_client* c = NULL;
  if (gnmr_client_create(&o, &c) != GNMR_OK) {
    printf("create failed: %s\n", gnmr_last_error());
    return 1;
  }
  if (strcmp(gnmr_version(), GNMR_VERSION_STRING) != 0) {
    printf("header %s, library %s\n", GNMR_VERSION_STRING, gnmr_version());
    return 1;
  }
  printf("gnmr %s c consumer: created and destroyed a client\n", gnmr_version());
  gnmr_client_destroy(c);
  return 0;
}
