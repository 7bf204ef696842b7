#include "objstore/s3_xml.h"

#include <gtest/gtest.h>

namespace ciuic::objstore::xml {
namespace {

// The shape of a ListObjectsV2 answer as the S3 API reference shows it, with encoding-type=url.
TEST(S3XmlTest, ParsesAListing) {
  const char kDoc[] =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>bucket</Name><Prefix>a%2F</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
      "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<Contents><Key>a%2Fx%20y</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
      "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
      "<StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key>a%2Fz</Key><Size>0</Size><ETag>\"e\"</ETag></Contents>"
      "<CommonPrefixes><Prefix>a%2Fd%2F</Prefix></CommonPrefixes>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
      "</ListBucketResult>";
  auto doc = Parse(kDoc);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->name, "ListBucketResult");
  EXPECT_EQ(doc->ChildText("IsTruncated"), "true");
  EXPECT_EQ(doc->ChildText("NextContinuationToken"),
            "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  auto contents = doc->Children("Contents");
  ASSERT_EQ(contents.size(), 2u);
  EXPECT_EQ(contents[0]->ChildText("Key"), "a%2Fx%20y");
  EXPECT_EQ(contents[0]->ChildText("ETag"), "\"fba9dede5f27731c9771645a39863328\"");
  EXPECT_EQ(contents[1]->ChildText("Size"), "0");
  ASSERT_EQ(doc->Children("CommonPrefixes").size(), 1u);
  EXPECT_EQ(doc->Children("CommonPrefixes")[0]->ChildText("Prefix"), "a%2Fd%2F");
  EXPECT_EQ(doc->Child("Missing"), nullptr);
  EXPECT_EQ(doc->ChildText("Missing"), "");
}

TEST(S3XmlTest, ParsesAnErrorWithEntitiesCdataCommentsAndPrefixes) {
  const char kDoc[] =
      "\xEF\xBB\xBF<?xml version='1.0'?><!DOCTYPE x><!-- c -->"
      "<s3:Error a='1>2' b=\"x\"><Code>NoSuchKey</Code>"
      "<Message>The key &lt;a&amp;b&gt; &#233;&#x1F600; &bogus; &amp</Message>"
      "<Key><![CDATA[<raw & key>]]></Key><Empty/><Resource>  spaced  </Resource>"
      "</s3:Error>\n";
  auto doc = Parse(kDoc);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->name, "Error");
  EXPECT_EQ(doc->ChildText("Code"), "NoSuchKey");
  EXPECT_EQ(doc->ChildText("Message"), "The key <a&b> \xC3\xA9\xF0\x9F\x98\x80 &bogus; &amp");
  EXPECT_EQ(doc->ChildText("Key"), "<raw & key>");
  ASSERT_NE(doc->Child("Empty"), nullptr);
  EXPECT_EQ(doc->ChildText("Resource"), "  spaced  ");
}

TEST(S3XmlTest, RejectsWhatItCannotRead) {
  for (const char* bad : {"", "   ", "text", "<a>", "<a></b>", "<a><b></a>", "<a x='1>",
                          "<a><![CDATA[x</a>", "<!-- only a comment"}) {
    auto doc = Parse(bad);
    EXPECT_FALSE(doc.ok()) << bad;
    if (!doc.ok()) {
      EXPECT_EQ(doc.status().code(), StatusCode::kCorruption) << bad;
    }
  }
  std::string deep;
  for (int i = 0; i < 100; ++i) {
    deep += "<a>";
  }
  EXPECT_EQ(Parse(deep).status().code(), StatusCode::kCorruption);
}

TEST(S3XmlTest, EscapeTextRoundTrips) {
  const std::string text = "a<b>&\"c'\xE1\x88\xB4";
  EXPECT_EQ(EscapeText(text), "a&lt;b&gt;&amp;\"c'\xE1\x88\xB4");
  EXPECT_EQ(DecodeEntities(EscapeText(text)), text);
}

}  // namespace
}  // namespace ciuic::objstore::xml
