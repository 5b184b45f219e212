#include "common/rank_table.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

struct Record {
  std::string name;
  int value = 0;
};

TEST(RankTable, FindsOnlyRanksThatHaveARecord) {
  RankTable<Record> t;
  EXPECT_EQ(t.Find(0), nullptr);
  EXPECT_EQ(t.Find(70000), nullptr);  // past the slots: no growth on a lookup
  t[5].value = 7;
  EXPECT_EQ(t.size(), 1u);
  ASSERT_NE(t.Find(5), nullptr);
  EXPECT_EQ(t.Find(5)->value, 7);
  EXPECT_EQ(t.Find(4), nullptr);
  EXPECT_EQ(t.Find(6), nullptr);
  t[5].value = 8;  // the same record again
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.Find(5)->value, 8);
}

TEST(RankTable, RecordsKeepTheirAddressAsTheTableGrowsAndIterateInRankOrder) {
  RankTable<Record> t;
  Record* three = &t[3];
  three->name = "three";
  for (uint32_t r : {100u, 0u, 41u, 7u}) t[r].value = static_cast<int>(r);
  EXPECT_EQ(&t[3], three);
  EXPECT_EQ(t.Find(3)->name, "three");
  std::vector<uint32_t> order;
  t.ForEach([&](uint32_t rank, Record& rec) {
    order.push_back(rank);
    ++rec.value;
  });
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 3, 7, 41, 100}));
  EXPECT_EQ(t.Find(41)->value, 42);
}

TEST(RankTable, ACopyOwnsItsOwnRecords) {
  RankTable<Record> a;
  a[2].name = "a";
  RankTable<Record> b = a;
  b[2].name = "b";
  b[9].value = 1;
  EXPECT_EQ(a.Find(2)->name, "a");
  EXPECT_EQ(a.Find(9), nullptr);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 2u);
  a = b;
  EXPECT_EQ(a.Find(2)->name, "b");
  EXPECT_NE(a.Find(2), b.Find(2));
}

}  // namespace
}  // namespace gnmr
