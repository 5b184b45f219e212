// Writes the binary seed inputs of the controller_state and job_sequence
// fuzz targets (the text targets' seeds are plain files). Run from a build:
//
//   ninja -C build-asan gnmr_fuzz_make_seeds
//   build-asan/fuzz/gnmr_fuzz_make_seeds fuzz/corpus
//
// controller_state: states of real controllers (fresh, warmed up, with
// units in recovery under each action, lag 0 with an entry treatment).
// job_sequence: a two-rank job through warmup, a spike, acks and an
// export/import, encoded for job_sequence_fuzz.cc's decoder (kept in step
// with it by hand: each helper below names the Driver method it feeds).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "controller/state_codec.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

// ---------------------------------------------------------------- states

std::string StateAfter(gnmr::ControllerConfig config, int units, int steps, int spike_every) {
  gnmr::StatusOr<gnmr::Controller> c = gnmr::Controller::Create(config);
  if (!c.ok()) std::exit(1);
  for (int u = 0; u < units; ++u) (void)c->AddUnit("layers." + std::to_string(u) + ".fc1");
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<gnmr::UnitSample> s(units);
    for (int u = 0; u < units; ++u) {
      s[u].unit_id = static_cast<uint32_t>(u);
      s[u].sumsq = 1.0 + 0.01 * static_cast<double>((t + u) % 5);
      s[u].numel = 64;
    }
    if (spike_every > 0 && t > config.warmup && t % spike_every == 0) {
      s[t % units].sumsq = 500.0;
      if (units > 1) s[(t + 1) % units].sumsq = std::numeric_limits<double>::quiet_NaN();
    }
    gnmr::Decision d;
    if (!c->Observe(t, s, &d).ok()) std::exit(1);
  }
  return gnmr::ControllerStateCodec::SaveToString(*c);
}

void WriteStates(const std::string& dir) {
  gnmr::ControllerConfig fresh;
  Write(dir + "/fresh.pb", StateAfter(fresh, 2, 0, 0));
  gnmr::ControllerConfig quick;
  quick.warmup = 3;
  quick.short_window = 2;
  quick.lock_steps = 4;
  Write(dir + "/warm.pb", StateAfter(quick, 3, 6, 0));
  Write(dir + "/recovery.pb", StateAfter(quick, 4, 20, 3));
  gnmr::ControllerConfig rules = quick;
  rules.lag = 0;
  rules.entry = gnmr::EntryTreatment::kSkip;
  rules.actions = {{"layers.0.*", gnmr::Action::kClip, 0.2},
                   {"layers.1.*", gnmr::Action::kSkip, -1},
                   {"layers.[23].*", gnmr::Action::kResetState, -1}};
  Write(dir + "/actions_lag0.pb", StateAfter(rules, 4, 25, 2));
}

// ------------------------------------------------------ job sequence ops
// The encoding of FuzzInput (fuzz_input.h): Range(lo, hi) with hi - lo <
// 256 reads one byte (value - lo), a wider one four bytes; Double() reads a
// kind byte (9: the value a * 0.25 + b / 64 from two bytes).

class Script {
 public:
  void Byte(uint8_t b) { bytes_.push_back(static_cast<char>(b)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Small(uint8_t a, uint8_t b) {  // Double(): a * 0.25 + b / 64
    Byte(9);
    Byte(a);
    Byte(b);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Driver::Run's header: world 2, max_o 2, lag 1, warmup 2, short_window 2,
// lock_steps 3, deadline 50 ms, 4 open steps, snapshot every 2 steps.
void Header(Script& s) {
  for (uint8_t b : {1, 1, 1, 1, 1, 2, 49, 3, 1}) s.Byte(b);
}

// Driver::Register: rank `rank` with units a and b, instance 1.
void Register(Script& s, uint8_t rank) {
  s.Byte(0);     // opcode
  s.Byte(0);     // job id: the fuzz job
  s.Byte(rank);  // rank
  s.Byte(0);     // world size: the job's
  s.Byte(1);     // instance
  s.Byte(2);     // two units
  for (uint8_t name : {0, 1}) {
    s.Byte(name);  // kNames[name]
    s.U32(1000);   // numel
    s.Byte(1);     // fp32
    s.Byte(1);     // not sharded
  }
}

// Driver::Attach with the rank's session.
void Attach(Script& s, uint8_t rank) {
  s.Byte(1);
  s.Byte(rank);
  s.Byte(1);
}

// Driver::Stats: rank `rank` reports the next step (rank 0) or the same
// step again (rank 1), units a and b with sumsq a_sumsq and 1.
void Stats(Script& s, uint8_t rank, uint8_t a_sumsq_quarters) {
  s.Byte(3);
  s.Byte(rank);
  if (rank == 0) {
    s.Byte(3);  // last + 1
  } else {
    s.Byte(1);  // last - 0
    s.Byte(0);
  }
  s.Byte(2);  // two units
  s.Byte(0);  // no short column
  for (uint8_t unit : {0, 1}) {
    s.Byte(unit);
    s.Small(unit == 0 ? a_sumsq_quarters : 4, 0);
    s.Byte(3);  // amax 0
    s.Byte(0);  // nonfinite
    s.Byte(0);  // zeros
  }
  s.Byte(1);  // no overhead
  s.Byte(1);  // the rank's session
}

// Driver::Tick: 60 ms.
void Tick(Script& s) {
  s.Byte(6);
  s.Byte(60);
}

// Driver::Ack: rank acks its newest step with one of its decisions.
void Ack(Script& s, uint8_t rank, uint8_t decision) {
  s.Byte(5);
  s.Byte(rank);
  s.Byte(3);  // step: last + 1
  s.Byte(1);  // a received decision
  s.Byte(decision);
  s.Byte(1);  // the rank's session
}

void WriteJobSequences(const std::string& dir) {
  Script s;
  Header(s);
  Register(s, 0);
  Register(s, 1);
  Attach(s, 0);
  Attach(s, 1);
  for (int step = 0; step < 12; ++step) {
    const uint8_t a = step == 8 ? 250 : 4;  // a spike of unit a at step 8
    Stats(s, 0, a);
    Stats(s, 1, a);
    Tick(s);
    if (step >= 1) {
      Ack(s, 0, static_cast<uint8_t>(step - 1));
      Ack(s, 1, static_cast<uint8_t>(step - 1));
    }
  }
  s.Byte(8);  // Driver::ExportImport: the job's own state
  s.Byte(0);
  Stats(s, 0, 4);
  Stats(s, 1, 4);
  Tick(s);
  Write(dir + "/two_ranks_spike.bin", s.bytes());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  WriteStates(root + "/controller_state");
  WriteJobSequences(root + "/job_sequence");
  return 0;
}
